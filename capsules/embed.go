// Package capsules embeds the bundled capsules (built module plus
// manifest) so that `capsule-host demo` and `capsule-host serve` with no
// config work from any directory. Add a capsule here to bundle it; its
// manifest's pinned sha256 still guards the module at load.
package capsules

import "embed"

// Bundled holds <name>/Capsule.toml and <name>/<module> per capsule.
//
//go:embed shell/Capsule.toml shell/shell.wasm mcp-stdio/Capsule.toml mcp-stdio/mcp-stdio.wasm
var Bundled embed.FS
