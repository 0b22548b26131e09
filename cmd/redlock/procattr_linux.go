package main

import "syscall"

// jobProcAttr returns COMMAND's process attributes as the guard starts it:
// SIGKILL when the guard's starting thread dies (see runGuard).
func jobProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
