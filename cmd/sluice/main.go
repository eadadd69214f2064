// Command sluice is Sluice's command-line tool.
//
// Usage:
//
//	sluice demo [flags]       drive a realistic load through Sluice against the simulator, live
//	sluice simulate [flags]   serve the simulated Discord API (see -h)
//	sluice version            print the version (sluice.Version, the library's)
//
// Every subcommand stops cleanly on SIGINT or SIGTERM.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/sluicehq/sluice"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "sluice:", err)
		}
		os.Exit(2)
	}
}

const usage = `Sluice sends HTTP requests to rate-limited REST APIs as fast as their rules allow.

Usage:
  sluice demo [flags]       drive a realistic load through Sluice against the in-process simulator
  sluice simulate [flags]   serve a simulated, rate-limited Discord API on loopback
  sluice version            print the version

Run "sluice <command> -h" for a command's flags.
`

// run executes one subcommand; it returns when the command is done or ctx
// ends.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return flag.ErrHelp
	}
	switch args[0] {
	case "demo":
		return demo(ctx, args[1:], stdout, stderr)
	case "simulate":
		return simulate(ctx, args[1:], stdout, stderr)
	case "version":
		fmt.Fprintln(stdout, "sluice", sluice.Version) // one version: the library's, also in the User-Agent
		return nil
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return nil
	default:
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("unknown command %q", args[0])
	}
}
