package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
)

// redlock soak refuses bad flags with the usage status and a message
// naming what is wrong, before it starts any server; --help prints the
// help on stdout.
func TestSoak_Flags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--mix", "bogus=1"}, `unknown soak operation "bogus"`},
		{[]string{"--mix", "acquire=0"}, "no operation with a weight above 0"},
		{[]string{"--ttl", "5"}, "flag -ttl: missing unit"},
		{[]string{"--progress", "-1s"}, "negative"},
		{[]string{"extra"}, `unexpected argument "extra"`},
		{[]string{"--duration", "-1s"}, "durations must not be negative"},
		{[]string{"--nodes", "2"}, "at least 3 nodes"},
		{[]string{"--clients", "-5"}, "at least 1 client"},
		{[]string{"--ttl", "50ms"}, "below 100 ms"},
	} {
		var out, errOut bytes.Buffer
		code := run(context.Background(), append([]string{"soak"}, tc.args...), &out, &errOut)
		assert.Equal(t, exitUsage, code, "%v", tc.args)
		assert.Contains(t, errOut.String(), tc.want, "%v", tc.args)
	}
	var out bytes.Buffer
	assert.Equal(t, 0, run(context.Background(), []string{"soak", "--help"}, &out, &bytes.Buffer{}))
	assert.Contains(t, out.String(), "Usage: redlock soak")
	assert.Contains(t, out.String(), "-clients")
}
