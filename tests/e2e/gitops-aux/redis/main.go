// Command redis serves an in-memory Redis (miniredis, which Argo CD's own
// core mode embeds) on the address given as its only argument, until killed.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/alicebob/miniredis/v2"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: redis 127.0.0.1:PORT")
		os.Exit(2)
	}
	server := miniredis.NewMiniRedis()
	if err := server.StartAddr(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "redis:", err)
		os.Exit(1)
	}
	fmt.Println("redis listening on", server.Addr())
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	<-stop
	server.Close()
}
