package main

import (
	"flag"
	"fmt"
	"strings"
	"time"
)

// durationFlag is a time.Duration flag whose parse error says what is
// wrong with the value: flag's own says "parse error" whatever it was,
// even for a number without its unit ("--ttl 5").
type durationFlag struct{ d *time.Duration }

// durationVar defines a duration flag as flag.DurationVar does.
func durationVar(fs *flag.FlagSet, p *time.Duration, name string, value time.Duration, usage string) {
	*p = value
	fs.Var(durationFlag{p}, name, usage)
}

// durationFlagOf defines a duration flag as flag.Duration does.
func durationFlagOf(fs *flag.FlagSet, name string, value time.Duration, usage string) *time.Duration {
	p := new(time.Duration)
	durationVar(fs, p, name, value, usage)
	return p
}

func (v durationFlag) String() string {
	if v.d == nil {
		return time.Duration(0).String()
	}
	return v.d.String()
}

func (v durationFlag) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return durationError(s, err)
	}
	*v.d = d
	return nil
}

// durationError says why s is not a duration, and how to write one. flag
// puts it after `invalid value "S" for flag -NAME: `.
func durationError(s string, err error) error {
	const units = "ns, us, ms, s, m, h"
	msg := strings.TrimPrefix(err.Error(), "time: ")
	switch {
	case strings.HasPrefix(msg, "missing unit"):
		return fmt.Errorf("missing unit: write %ss for seconds (units: %s)", s, units)
	case strings.HasPrefix(msg, "unknown unit"):
		return fmt.Errorf("%s (units: %s, e.g. 30s or 1m30s)", msg, units)
	}
	return fmt.Errorf("%s: write a number and a unit, e.g. 30s, 500ms or 1m30s", msg)
}

// printDefaults prints fs's flags in flag.PrintDefaults' layout ("  -name
// type", then the usage and the default on lines indented by 8 spaces),
// with "duration" for the value of a durationFlag, and the usage wrapped at
// termWidth columns (PrintDefaults never wraps, and indents with a tab).
func printDefaults(fs *flag.FlagSet) {
	var b strings.Builder
	fs.VisitAll(func(f *flag.Flag) {
		typ, usage := flag.UnquoteUsage(f)
		if _, ok := f.Value.(durationFlag); ok {
			typ = "duration"
		}
		b.WriteString("  -" + f.Name)
		if typ != "" {
			b.WriteString(" " + typ)
		}
		b.WriteString("\n")
		if def := defaultText(f); def != "" {
			usage += " (default " + def + ")"
		}
		for _, line := range wrap(usage, "        ", "        ", termWidth) {
			b.WriteString(line + "\n")
		}
	})
	fmt.Fprint(fs.Output(), b.String())
}

// defaultText is a flag's default as PrintDefaults shows it ("" for a zero
// value, quoted for a string).
func defaultText(f *flag.Flag) string {
	switch f.DefValue {
	case "", "0", "false", "0s":
		return ""
	}
	if g, ok := f.Value.(flag.Getter); ok {
		if _, isString := g.Get().(string); isString {
			return fmt.Sprintf("%q", f.DefValue)
		}
	}
	return f.DefValue
}
