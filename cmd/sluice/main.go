// Command sluice is Sluice's command-line tool.
//
// Usage:
//
//	sluice demo [flags]       drive a realistic load through Sluice against the simulator, live
//	sluice simulate [flags]   serve the simulated Discord API (see -h)
//	sluice proxy [flags]      relay Discord API requests through one rate limiter per token (see -h)
//	sluice version            print the version, the commit it was built from and the Go toolchain (also --version)
//	sluice help [command]     print the usage, or a command's flags
//
// "sluice demo -processes N" runs N processes of this program (as the
// unlisted command "demo-child") on one token through Redis.
//
// Every subcommand stops cleanly on SIGINT or SIGTERM; a second signal ends
// the process at once. Exit status: 0 on success and for -h, 2 for a usage
// error (unknown command or flag, an argument a command does not take, a
// value out of range) or a failure, and 128+signal (130 for SIGINT) when a
// demo is interrupted before its load is done. The proxy exits 0 once a
// signal has shut it down gracefully.
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
	"time"
)

func main() {
	ctx, cancel := context.WithCancelCause(context.Background())
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		s := <-sigs
		signal.Stop(sigs) // a second signal ends the process at once
		cancel(interrupted{s})
	}()
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	os.Exit(exitCode(err, os.Stderr))
}

// interrupted is the cause of the context's end when a signal arrives. It
// is a context.Canceled, as the limiter's requests report it.
type interrupted struct{ sig os.Signal }

func (e interrupted) Error() string        { return e.sig.String() + " signal received" }
func (e interrupted) Is(target error) bool { return target == context.Canceled }

// usageError is a command line the command cannot run: an unknown command or
// flag, an argument a command does not take, or a value out of range.
type usageError struct {
	cmd string // "demo", "simulate", ...; "" for the command itself
	err error
}

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usageErrorf(cmd, format string, args ...any) error {
	return usageError{cmd: cmd, err: fmt.Errorf(format, args...)}
}

// exitCode prints err, if it needs printing, and returns the process's
// exit status for it.
func exitCode(err error, stderr io.Writer) int {
	var ue usageError
	var sig interrupted
	switch {
	case err == nil:
		return 0
	case errors.As(err, &sig): // the demo's report says so already
		if s, ok := sig.sig.(syscall.Signal); ok {
			return 128 + int(s)
		}
		return 130
	case errors.Is(err, context.Canceled):
		return 130
	case errors.Is(err, flag.ErrHelp): // no command: the usage is printed
		return 2
	case errors.As(err, &ue):
		prefix, help := "sluice", "sluice -h"
		if ue.cmd != "" {
			prefix, help = "sluice "+ue.cmd, "sluice "+ue.cmd+" -h"
		}
		fmt.Fprintf(stderr, "%s: %v\nRun %q for usage.\n", prefix, ue.err, help)
		return 2
	default:
		fmt.Fprintln(stderr, "sluice:", err)
		return 2
	}
}

const usage = `Sluice sends HTTP requests to rate-limited REST APIs as fast as their rules allow.

Usage:
  sluice demo [flags]       drive a realistic load through Sluice against the in-process simulator
  sluice simulate [flags]   serve a simulated, rate-limited Discord API on loopback
  sluice proxy [flags]      relay Discord API requests through one rate limiter per token
  sluice version            print the version and the commit it was built from (also --version)
  sluice help [command]     print this, or a command's flags

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
	case "proxy":
		return proxyCommand(ctx, args[1:], stdout, stderr)
	case childCommand: // not listed: a process of "sluice demo -processes N" (child.go)
		return demoChild(ctx, args[1:], os.Stdin, stdout, stderr)
	case "version":
		fs := flag.NewFlagSet("version", flag.ContinueOnError)
		if done, err := parseFlags(fs, args[1:], "Usage: sluice version\n\nPrint the version (the library's, also in its User-Agent), the module\nversion and commit the binary was built from, and the Go toolchain.\n", stdout); done {
			return err
		}
		return printVersion(stdout)
	case "--version", "-version":
		if len(args) > 1 {
			return usageErrorf("", "unexpected argument %q: %s takes none", args[1], args[0])
		}
		return printVersion(stdout)
	case "-h", "-help", "--help", "help":
		switch len(args) {
		case 1:
			fmt.Fprint(stdout, usage)
			return nil
		case 2:
			switch args[1] {
			case "demo", "simulate", "proxy", "version":
				return run(ctx, []string{args[1], "-h"}, stdout, stderr)
			}
			return usageErrorf("", "no help for %q: not a command", args[1])
		default:
			return usageErrorf("", "unexpected argument %q: help takes at most one command", args[2])
		}
	default:
		return usageErrorf("", "unknown command %q", args[0])
	}
}

// parseFlags parses a subcommand's flags. With -h, -help or --help it
// prints the usage and the flags to stdout and returns done and no error;
// a flag it does not know, a value it cannot parse and any argument that is
// not a flag (the subcommands take none) are usage errors, returned with
// done. Nothing is printed for them here: main prints the error once.
func parseFlags(fs *flag.FlagSet, args []string, usage string, stdout io.Writer) (done bool, err error) {
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	switch err := fs.Parse(args); {
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(stdout, usage)
		hasFlags := false
		fs.VisitAll(func(*flag.Flag) { hasFlags = true })
		if hasFlags {
			fmt.Fprint(stdout, "\nFlags:\n")
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			fs.SetOutput(io.Discard)
		}
		return true, nil
	case err != nil:
		return true, usageError{cmd: fs.Name(), err: err}
	}
	if fs.NArg() > 0 {
		return true, usageErrorf(fs.Name(), "unexpected argument %q: %s takes no arguments", fs.Arg(0), fs.Name())
	}
	return false, nil
}

// atLeast checks that a flag's value is lo or more (and not NaN).
func atLeast[T int | float64 | time.Duration](cmd, name string, v, lo T) error {
	if !(v >= lo) {
		return usageErrorf(cmd, "-%s must be %v or more, got %v", name, lo, v)
	}
	return nil
}

// between checks that a flag's value is in [lo, hi] (and not NaN).
func between[T int | float64 | time.Duration](cmd, name string, v, lo, hi T) error {
	if !(v >= lo && v <= hi) {
		return usageErrorf(cmd, "-%s must be between %v and %v, got %v", name, lo, hi, v)
	}
	return nil
}
