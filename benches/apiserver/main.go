// Command bench-apiserver is the Go half of scripts/bench-apiserver.sh, with
// only the standard library:
//
//	bench-apiserver load -server URL -ca FILE -cert FILE -key FILE -path P [-path P ...]
//	bench-apiserver noop -listen ADDR -cert FILE -key FILE
//
// load issues merge-patch writes to the given object paths through the
// kube-apiserver as the client certificate's user and prints one JSON line:
// count, errors, p50 and p99 in microseconds. noop is the cheapest validating
// webhook: it answers every AdmissionReview with allowed: true and its uid, and
// GET /calls says how many reviews it answered.
package main

import (
	"fmt"
	"os"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: bench-apiserver load|noop [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "load":
		err = load(os.Args[2:])
	case "noop":
		err = noop(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q (want load or noop)", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-apiserver:", err)
		os.Exit(1)
	}
}
