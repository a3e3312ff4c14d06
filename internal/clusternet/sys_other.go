//go:build !linux

package clusternet

import (
	"errors"
	"syscall"
)

var errNotLinux = errors.New("network namespaces exist only on Linux")

func sysProcAttr() *syscall.SysProcAttr { return nil }

func inNetns(string, func() error) error { return errNotLinux }

func platformErr() error { return errNotLinux }
