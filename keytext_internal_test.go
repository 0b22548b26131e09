package redlock

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"pgregory.net/rapid"
)

func TestKeyText(t *testing.T) {
	assert.Equal(t, `"job"`, keyText("job"))
	assert.Equal(t, "job", keyAttr("job"))
	short := strings.Repeat("a", keyTextLen)
	assert.Equal(t, `"`+short+`"`, keyText(short), "shown whole up to keyTextLen")
	long := strings.Repeat("a", keyTextLen+1)
	assert.Equal(t, `"`+long[:keyTextPrefix]+`"… (65 bytes)`, keyText(long))
	assert.Equal(t, long[:keyTextPrefix]+"… (65 bytes)", keyAttr(long))

	// Whatever the key: short, a prefix of the key cut at a character
	// boundary, and its length.
	rapid.Check(t, func(t *rapid.T) {
		key := rapid.StringOf(rapid.RuneFrom([]rune{'a', 'é', '€', '😀'})).Draw(t, "key")
		got := keyAttr(key)
		assert.LessOrEqual(t, len(got), keyTextLen+len("… (9999999999 bytes)"))
		if len(key) <= keyTextLen {
			assert.Equal(t, key, got)
			return
		}
		cut := strings.Index(got, "… (")
		assert.True(t, strings.HasPrefix(key, got[:cut]))
		assert.True(t, utf8.RuneStart(key[cut]), "cut at a character boundary")
		assert.Greater(t, cut, keyTextPrefix-utf8.UTFMax)
	})
}
