;; Imports [resource-drop]process-handle, (i32) -> () in the WIT, with an
;; extra parameter. Rebuild: wat2wasm badsig.wat
(module (import "capsule:process/host@1.0.0" "[resource-drop]process-handle" (func (param i32 i32))))
