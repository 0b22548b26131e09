package main

import "syscall"

// jobProcAttr returns COMMAND's process attributes as the watchdog starts it:
// SIGKILL when the watchdog's starting thread dies (see runWatchdog).
func jobProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
