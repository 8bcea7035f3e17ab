;; Imports nothing and exports no tool interface. Rebuild: wat2wasm noexports.wat
(module (memory (export "memory") 1))
