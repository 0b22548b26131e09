package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
)

// Bad flags are refused with the usage status before anything starts.
func TestRun_BadFlags(t *testing.T) {
	for _, args := range [][]string{{"--trials", "0"}, {"--nodes", "2"}, {"--time-scale", "0.5"}, {"--clocks", "fast"}, {"extra"}, {"--nope"}} {
		var out, errOut bytes.Buffer
		assert.Equal(t, 64, run(context.Background(), args, &out, &errOut), "%v", args)
		assert.Empty(t, out.String())
		assert.NotEmpty(t, errOut.String())
	}
}
