;; Linking fixture (enginetest testLink), the provider: the memory, table
;; and global another instance of the same Store imports, the way a
;; component's main module gives its memory to the preview1 adapter and
;; the wit-component shim's table is filled by the fixups instance.
;; Rebuild: wat2wasm link_provider.wat -o link_provider.wasm
(module
  (memory (export "memory") 1)
  (table (export "table") 2 funcref)
  (global (export "counter") (mut i32) (i32.const 0))
  (type $ii (func (param i32) (result i32)))
  (func (export "load") (param i32) (result i32) (i32.load (local.get 0)))
  (func (export "count") (result i32) (global.get 0))
  ;; dispatch(x, slot) calls slot of the shared table, which the user fills.
  (func (export "dispatch") (param i32 i32) (result i32)
    (call_indirect (type $ii) (local.get 0) (local.get 1))))
