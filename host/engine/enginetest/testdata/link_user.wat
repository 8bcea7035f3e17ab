;; Linking fixture (enginetest testLink), the user: every import is given
;; by the Store (provider exports and a host function), none by name.
;; Rebuild: wat2wasm link_user.wat -o link_user.wasm
(module
  (import "env" "mem" (memory 1))
  (import "env" "tbl" (table 1 funcref))
  (import "env" "counter" (global $c (mut i32)))
  (import "env" "load" (func $load (param i32) (result i32)))
  (import "host" "twice" (func $twice (param i32) (result i32)))
  (type $ii (func (param i32) (result i32)))
  ;; Fills slot 1 of the provider's table, as wit-component's fixups do.
  (elem (table 0) (i32.const 1) func $plus)
  (func $plus (param i32) (result i32)
    (global.set $c (i32.add (global.get $c) (i32.const 1)))
    (i32.add (local.get 0) (i32.const 100)))
  ;; Stores x at 8 in the shared memory, reads it back through the
  ;; provider, doubles it through the host.
  (func (export "run") (param i32) (result i32)
    (i32.store (i32.const 8) (local.get 0))
    (call $twice (call $load (i32.const 8)))))
