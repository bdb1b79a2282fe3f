// Package cli gives every example the same answer to -h: what it does and
// its flags, instead of running.
package cli

import (
	"flag"
	"fmt"
	"os"
)

// Parse sets flag.Usage to print "usage: name synopsis", the about text
// and the flags of flag.CommandLine, then parses os.Args. -h and -help
// print that on stderr and exit with status 0; an unknown flag prints it
// and exits with status 2; arguments after the flags are refused the
// same way, as no example takes any.
func Parse(name, synopsis, about string) {
	flag.Usage = func() {
		w := flag.CommandLine.Output()
		fmt.Fprintf(w, "usage: %s %s\n\n%s\n", name, synopsis, about)
		n := 0
		flag.VisitAll(func(*flag.Flag) { n++ })
		if n > 0 {
			fmt.Fprintln(w, "\nflags:")
			flag.PrintDefaults()
		}
	}
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(flag.CommandLine.Output(), "%s: unexpected argument %q\n", name, flag.Arg(0))
		flag.Usage()
		os.Exit(2)
	}
}
