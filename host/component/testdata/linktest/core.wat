;; Core module of the component-linking fixture (host/component
;; TestLinkComponent): world test:comp/w of wit/comp/test.wit, written by
;; hand to the Canonical ABI, so the host's canon lower (host imports with
;; memory and realloc), canon lift with post-return, and hostile options
;; (a realloc returning garbage, a post-return that traps) are all tested.
;; Rebuild: see build.sh.
(module
  (import "test:comp/host@1.0.0" "add" (func $add (param i32 i32) (result i32)))
  (import "test:comp/host@1.0.0" "greet" (func $greet (param i32 i32 i32)))
  (memory (export "memory") 1)
  (global $heap (mut i32) (i32.const 1024))
  ;; evil: 1 makes cabi_realloc return an out-of-range pointer.
  (global $evil (mut i32) (i32.const 0))
  (global $posts (mut i32) (i32.const 0))
  (func $realloc (export "cabi_realloc") (param i32 i32 i32 i32) (result i32)
    (local $p i32)
    (if (i32.eq (global.get $evil) (i32.const 1)) (then (return (i32.const 0xfffffff0))))
    (local.set $p (i32.and (i32.add (global.get $heap) (i32.sub (local.get 2) (i32.const 1)))
                           (i32.sub (i32.const 0) (local.get 2))))
    (global.set $heap (i32.add (local.get $p) (local.get 3)))
    (local.get $p))
  (func (export "run") (param i32) (result i32)
    (call $add (local.get 0) (i32.const 1)))
  ;; echo: returns a pointer to (ptr, len) of the string it was given.
  (func (export "echo") (param i32 i32) (result i32)
    (i32.store (i32.const 16) (local.get 0))
    (i32.store (i32.const 20) (local.get 1))
    (i32.const 16))
  (func (export "cabi_post_echo") (param i32)
    (global.set $posts (i32.add (global.get $posts) (i32.const 1))))
  ;; hello: asks the host to greet, returns its answer.
  (func (export "hello") (param i32 i32) (result i32)
    (call $greet (local.get 0) (local.get 1) (i32.const 32))
    (i32.const 32))
  (func (export "cabi_post_hello") (param i32))
  (func (export "set-evil") (param i32) (global.set $evil (local.get 0)))
  (func (export "boom") (result i32)
    (i32.store (i32.const 48) (i32.const 0))
    (i32.store (i32.const 52) (i32.const 0))
    (i32.const 48))
  (func (export "cabi_post_boom") (param i32) unreachable)
  (func (export "posts") (result i32) (global.get $posts)))
