;; Imports an interface version no host serves. Rebuild: wat2wasm badmodule.wat
(module (import "capsule:process/host@2.0.0" "spawn" (func (param i32 i32) (result i32))))
