package terminal

import (
	"unicode"
	"unicode/utf8"
)

// MaxClusterRunes caps how many runes may extend one character (combining
// marks, joiners, format characters, Hangul jamo): the emulator keeps a
// grapheme cluster in one cell whatever its length, so without a cap a
// program writing "e" + 400 combining accents, over and over, puts a
// write-sized cluster in every cell of the screen and the scrollback
// (the notes measured 40 MiB of heap for 32 MiB of such output). Real
// clusters (accents, emoji ZWJ families, Hangul) stay far below it; the
// runes past it are dropped, as a terminal that cannot render them would.
const MaxClusterRunes = 32

// clusterCap is the cap's state across writes: the length of the run
// that extends the last character, whether the last rune joins the next
// (ZWJ and other format characters), and an incomplete UTF-8 sequence
// left at the end of the last write (at most 3 bytes).
type clusterCap struct {
	run    int
	joined bool
	carry  [utf8.UTFMax]byte
	nCarry int
}

// extends reports whether r belongs to the character before it.
func (c *clusterCap) extends(r rune) bool {
	switch {
	case c.joined:
		return true
	case unicode.In(r, unicode.Mn, unicode.Me, unicode.Mc, unicode.Cf):
		return true
	case r >= 0x1160 && r <= 0x11FF, r >= 0xD7B0 && r <= 0xD7FF: // Hangul jamo V and T
		return true
	}
	return false
}

// filter returns p with the runes past the cap removed. It does not
// modify p; it allocates only when something is dropped or a sequence
// was split between writes.
func (c *clusterCap) filter(p []byte) []byte {
	if c.nCarry > 0 {
		p = append(append([]byte(nil), c.carry[:c.nCarry]...), p...)
		c.nCarry = 0
	}
	var out []byte // nil until a rune is dropped
	for i := 0; i < len(p); {
		b := p[i]
		if b < utf8.RuneSelf { // ASCII: controls and escape sequences end a run
			c.run, c.joined = 0, false
			if out != nil {
				out = append(out, b)
			}
			i++
			continue
		}
		if !utf8.FullRune(p[i:]) && len(p)-i < utf8.UTFMax {
			c.nCarry = copy(c.carry[:], p[i:])
			if out == nil {
				out = p[:i:i]
			}
			return out
		}
		r, n := utf8.DecodeRune(p[i:])
		keep := true
		if c.extends(r) {
			c.run++
			keep = c.run <= MaxClusterRunes
		} else {
			c.run = 0
		}
		c.joined = r == 0x200D || unicode.Is(unicode.Cf, r)
		if !keep && out == nil {
			out = append([]byte(nil), p[:i]...)
		}
		if keep && out != nil {
			out = append(out, p[i:i+n]...)
		}
		i += n
	}
	if out == nil {
		return p
	}
	return out
}
