//go:build !linux

package main

import "syscall"

// jobProcAttr returns COMMAND's process attributes as the watchdog starts it.
// Without a parent-death signal the watchdog's life pipe alone stops COMMAND.
func jobProcAttr() *syscall.SysProcAttr { return nil }
