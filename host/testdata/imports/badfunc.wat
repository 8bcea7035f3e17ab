;; Imports a 1.1.0-only function from 1.0.0. Rebuild: wat2wasm badfunc.wat
(module (import "capsule:process/host@1.0.0" "spawn-persistent" (func (param i32))))
