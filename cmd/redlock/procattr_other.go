//go:build !linux

package main

import "syscall"

// jobProcAttr returns COMMAND's process attributes as the guard starts it.
// Without a parent-death signal the guard's life pipe alone stops COMMAND.
func jobProcAttr() *syscall.SysProcAttr { return nil }
