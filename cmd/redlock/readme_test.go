package main

import (
	"bytes"
	"context"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// cronSection returns the README's "Cron on several hosts" section.
func cronSection(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	_, sec, ok := strings.Cut(string(b), "## Cron on several hosts\n")
	require.True(t, ok, "README has a cron section")
	sec, _, _ = strings.Cut(sec, "\n## ")
	return sec
}

// The README's cron section says what the binary does: its crontab line
// parses with the flags it means, every flag it names exists, and it lists
// every exit status of `redlock exec --help`.
func TestREADME_CronSectionMatchesTheBinary(t *testing.T) {
	sec := cronSection(t)
	var help bytes.Buffer
	require.Equal(t, 0, runExec(context.Background(), []string{"--help"}, &help, &bytes.Buffer{}))

	// The crontab line.
	var nodes, line string
	for _, l := range strings.Split(sec, "\n") {
		if v, ok := strings.CutPrefix(l, "REDLOCK_NODES="); ok {
			nodes = v
		}
		if _, rest, ok := strings.Cut(l, "redlock exec "); ok && line == "" {
			line = rest
		}
	}
	require.NotEmpty(t, nodes)
	require.NotEmpty(t, line)
	// cron runs jobs with PATH=/usr/bin:/bin, where go install does not put
	// the binary: the crontab lines name it by its full path.
	for name, text := range map[string]string{"README": sec, "exec --help": help.String()} {
		for _, l := range strings.Split(text, "\n") {
			if strings.Contains(l, "* * ") && strings.Contains(l, "redlock exec ") {
				assert.Contains(t, l, "/usr/local/bin/redlock exec ", "%s: a crontab line names redlock by its full path: %s", name, l)
			}
		}
	}
	assert.Contains(t, sec, "GOBIN=/usr/local/bin go install", "the README says how to put it there")
	t.Setenv(nodesEnv, nodes)
	var stdout, stderr bytes.Buffer
	f, code, ok := parseExecFlags(strings.Fields(line), &stdout, &stderr)
	require.True(t, ok, "the README's crontab line parses: %d %s", code, stderr.String())
	assert.Len(t, f.nodes, 3)
	assert.Equal(t, 5*time.Minute, f.minHold, "the cron example holds each tick")
	assert.Equal(t, 0, f.busyExit, "the cron example keeps busy runs quiet")

	// Every flag the section names exists.
	flags := regexp.MustCompile("(?m)^  -([a-z-]+)").FindAllStringSubmatch(help.String(), -1)
	defined := map[string]bool{}
	for _, m := range flags {
		defined[m[1]] = true
	}
	require.True(t, defined["min-hold"], help.String())
	named := 0
	for _, m := range regexp.MustCompile("(?:^|[\\s`(])--?([a-z][a-z-]*)").FindAllStringSubmatch(sec, -1) {
		if m[1] == "version" { // redlock --version, not an exec flag
			continue
		}
		named++
		assert.True(t, defined[m[1]], "the README names --%s, which redlock exec does not have", m[1])
	}

	assert.Greater(t, named, 10, "the section names the flags it explains")

	// Every exit status in the help is in the README, and the -v line that
	// tells a job's own status is spelled the same.
	_, statuses, ok := strings.Cut(help.String(), "Exit status:\n")
	require.True(t, ok)
	statuses, _, _ = strings.Cut(statuses, "\n\n")
	for _, n := range regexp.MustCompile(`\b(6[4-9]|7\d|1[2-4]\d)\b`).FindAllString(statuses, -1) {
		assert.Contains(t, sec, n, "exit status %s is in the README's list", n)
	}
	const vLine = "redlock exec: COMMAND exited with status N"
	assert.Contains(t, help.String(), vLine)
	assert.Contains(t, sec, vLine)
}
