// CPU profile of one run, for -cpuprofile.
package main

import (
	"os"
	"runtime/pprof"
)

func profiled(path string, f func() result) result {
	out, err := os.Create(path)
	if err != nil {
		panic(err)
	}
	defer out.Close()
	pprof.StartCPUProfile(out)
	defer pprof.StopCPUProfile()
	return f()
}
