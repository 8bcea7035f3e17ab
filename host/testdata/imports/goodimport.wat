;; Imports capsule:process/host@1.1.0 correctly; its manifest decides
;; whether the import is declared. Rebuild: wat2wasm goodimport.wat
(module (import "capsule:process/host@1.1.0" "[resource-drop]process-handle" (func (param i32))))
