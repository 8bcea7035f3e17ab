package terminal

import "bytes"

// The bracketed-paste markers (DECSET 2004).
var (
	pasteStart = []byte("\x1b[200~")
	pasteEnd   = []byte("\x1b[201~")
)

// Paste encodes text as a paste, as tmux's paste-buffer does: line feeds
// (and CR LF pairs) become carriage returns, the Enter a keyboard sends.
// With m.BracketedPaste the text is wrapped in CSI 200~ ... CSI 201~, so
// the application takes it as one unit (bash runs a pasted script once,
// not line by line); otherwise it is sent raw, as typing would. An end
// marker inside the text is removed: it would end the bracket early and
// let the rest be taken as typed keys (the paste-injection attack).
func Paste(text []byte, m Modes) []byte {
	body := bytes.ReplaceAll(text, []byte("\r\n"), []byte("\r"))
	body = bytes.ReplaceAll(body, []byte("\n"), []byte("\r"))
	if !m.BracketedPaste {
		return body
	}
	for bytes.Contains(body, pasteEnd) {
		body = bytes.ReplaceAll(body, pasteEnd, nil)
	}
	out := make([]byte, 0, len(pasteStart)+len(body)+len(pasteEnd))
	out = append(append(append(out, pasteStart...), body...), pasteEnd...)
	return out
}

// Submit is a paste followed by Enter (outside the bracket, so the
// application runs what was pasted).
func Submit(text []byte, m Modes) []byte {
	return append(Paste(text, m), '\r')
}
