;; hostile.wat: a capsule that feeds the host malformed Canonical ABI input.
;;
;; It exports the capsule:guest@1.0.0 world minimally (describe, call,
;; cabi_realloc, memory) so that the host loads it. Each tool but a_ok makes
;; one import call of capsule:process/host@1.1.0 with one malformed argument;
;; the host must trap that call with a reason naming what was wrong, discard
;; the instance, and go on serving. `call` dispatches on the first letter of
;; the tool name (a, b, c, ...).
;;
;; Build: wat2wasm hostile.wat -o hostile.wasm (wabt, Debian 1.0.32), or
;; `make hostile` in abi-tests; TestHostileWasmIsFreshBuild checks the
;; committed .wasm. The data segments at 16 and 512..7168 are the tool-spec
;; table: keep them in step with the dispatch in $call.
;;
;; Memory map (2 pages):
;;   16    describe return area: (list ptr, len)
;;   32    call return area: result<string, string> = ok("{}")
;;   64    "{}"
;;   96    a well-formed process id: 52 x 'a'
;;   160   invalid UTF-8: ff fe
;;   176   "/bin/sh"
;;   192   args ["-c", "exec sleep 30"]   (list<string>: ptr,len pairs)
;;   208   args ["-c", "printf x"]
;;   224   "-c"   240 "exec sleep 30"   320 "printf x"
;;   288   list<process-id> of one id (aligned); 289 is misaligned
;;   512   tool-spec records (24 bytes each); 1024 tool names (32 each)
;;   4096  scratch return area (aligned 8, 1 KiB)
;;   5120  descriptions (96 each); 7168 the input schema
;;   8192  cabi_realloc heap (bump allocator, reset by each call)
(module
  (type $status_t (func (param i32 i32 i32)))
  (import "capsule:process/host@1.1.0" "status" (func $status (type $status_t)))
  (import "capsule:process/host@1.1.0" "status-many" (func $status_many (type $status_t)))
  (import "capsule:process/host@1.1.0" "signal" (func $signal (param i32 i32 i32 i32)))
  (import "capsule:process/host@1.1.0" "read-since" (func $read_since (param i32 i32 i32 i32 i32 i32 i32 i32)))
  (import "capsule:process/host@1.1.0" "spawn-persistent" (func $spawn_persistent (param i32 i32)))
  (import "capsule:process/host@1.1.0" "spawn"
    (func $spawn (param i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i64 i32)))
  (import "capsule:process/host@1.1.0" "spawn-background"
    (func $spawn_background (param i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i64 i32)))
  (import "capsule:process/host@1.1.0" "[method]process-handle.os-pid" (func $os_pid (param i32 i32)))
  (import "capsule:process/host@1.1.0" "[method]process-handle.wait" (func $wait (param i32 i32 i64 i32)))
  (import "capsule:process/host@1.1.0" "[resource-drop]process-handle" (func $drop (param i32)))

  (memory (export "memory") 2)
  (global $heap (mut i32) (i32.const 8192))
  ;; 1: cabi_realloc returns an out-of-bounds pointer.
  (global $evil (mut i32) (i32.const 0))

  (data (i32.const 16) "\00\02\00\00\12\00\00\00")
  (data (i32.const 32) "\00\00\00\00\40\00\00\00\02\00\00\00")
  (data (i32.const 64) "{}")
  (data (i32.const 96) "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa")
  (data (i32.const 160) "\ff\fe")
  (data (i32.const 176) "/bin/sh")
  (data (i32.const 192) "\e0\00\00\00\02\00\00\00\f0\00\00\00\0d\00\00\00")
  (data (i32.const 208) "\e0\00\00\00\02\00\00\00\40\01\00\00\08\00\00\00")
  (data (i32.const 224) "-c")
  (data (i32.const 240) "exec sleep 30")
  (data (i32.const 288) "\60\00\00\00\34\00\00\00")
  (data (i32.const 320) "printf x")
  (data (i32.const 512) "\00\04\00\00\04\00\00\00\00\14\00\00\12\00\00\00\00\1c\00\00\11\00\00\00") ;; a_ok
  (data (i32.const 536) "\20\04\00\00\0c\00\00\00\60\14\00\00\37\00\00\00\00\1c\00\00\11\00\00\00") ;; b_oob_string
  (data (i32.const 560) "\40\04\00\00\11\00\00\00\c0\14\00\00\2e\00\00\00\00\1c\00\00\11\00\00\00") ;; c_len_past_memory
  (data (i32.const 584) "\60\04\00\00\0b\00\00\00\20\15\00\00\31\00\00\00\00\1c\00\00\11\00\00\00") ;; d_len_wraps
  (data (i32.const 608) "\80\04\00\00\13\00\00\00\80\15\00\00\31\00\00\00\00\1c\00\00\11\00\00\00") ;; e_misaligned_retptr
  (data (i32.const 632) "\a0\04\00\00\11\00\00\00\e0\15\00\00\3d\00\00\00\00\1c\00\00\11\00\00\00") ;; f_misaligned_list
  (data (i32.const 656) "\c0\04\00\00\0e\00\00\00\40\16\00\00\2d\00\00\00\00\1c\00\00\11\00\00\00") ;; g_invalid_utf8
  (data (i32.const 680) "\e0\04\00\00\0d\00\00\00\a0\16\00\00\3f\00\00\00\00\1c\00\00\11\00\00\00") ;; h_realloc_oob
  (data (i32.const 704) "\00\05\00\00\0f\00\00\00\00\17\00\00\28\00\00\00\00\1c\00\00\11\00\00\00") ;; i_forged_handle
  (data (i32.const 728) "\20\05\00\00\0d\00\00\00\60\17\00\00\2c\00\00\00\00\1c\00\00\11\00\00\00") ;; j_null_handle
  (data (i32.const 752) "\40\05\00\00\10\00\00\00\c0\17\00\00\28\00\00\00\00\1c\00\00\11\00\00\00") ;; k_dropped_handle
  (data (i32.const 776) "\60\05\00\00\0d\00\00\00\20\18\00\00\28\00\00\00\00\1c\00\00\11\00\00\00") ;; l_double_drop
  (data (i32.const 800) "\80\05\00\00\0a\00\00\00\80\18\00\00\29\00\00\00\00\1c\00\00\11\00\00\00") ;; m_bad_enum
  (data (i32.const 824) "\a0\05\00\00\0c\00\00\00\e0\18\00\00\2b\00\00\00\00\1c\00\00\11\00\00\00") ;; n_bad_option
  (data (i32.const 848) "\c0\05\00\00\0c\00\00\00\40\19\00\00\36\00\00\00\00\1c\00\00\11\00\00\00") ;; o_params_oob
  (data (i32.const 872) "\e0\05\00\00\0c\00\00\00\a0\19\00\00\37\00\00\00\00\1c\00\00\11\00\00\00") ;; p_retptr_oob
  (data (i32.const 896) "\00\06\00\00\11\00\00\00\00\1a\00\00\36\00\00\00\00\1c\00\00\11\00\00\00") ;; q_wait_bad_option
  (data (i32.const 920) "\20\06\00\00\10\00\00\00\60\1a\00\00\35\00\00\00\00\1c\00\00\11\00\00\00") ;; r_len_over_limit
  (data (i32.const 1024) "a_ok")
  (data (i32.const 1056) "b_oob_string")
  (data (i32.const 1088) "c_len_past_memory")
  (data (i32.const 1120) "d_len_wraps")
  (data (i32.const 1152) "e_misaligned_retptr")
  (data (i32.const 1184) "f_misaligned_list")
  (data (i32.const 1216) "g_invalid_utf8")
  (data (i32.const 1248) "h_realloc_oob")
  (data (i32.const 1280) "i_forged_handle")
  (data (i32.const 1312) "j_null_handle")
  (data (i32.const 1344) "k_dropped_handle")
  (data (i32.const 1376) "l_double_drop")
  (data (i32.const 1408) "m_bad_enum")
  (data (i32.const 1440) "n_bad_option")
  (data (i32.const 1472) "o_params_oob")
  (data (i32.const 1504) "p_retptr_oob")
  (data (i32.const 1536) "q_wait_bad_option")
  (data (i32.const 1568) "r_len_over_limit")
  (data (i32.const 5120) "benign: returns {}")
  (data (i32.const 5216) "status(id) with a string pointer past the end of memory")
  (data (i32.const 5312) "status(id) with a length that runs past memory")
  (data (i32.const 5408) "status(id) whose pointer+length wraps around 2^32")
  (data (i32.const 5504) "status(id) with a return pointer not aligned to 8")
  (data (i32.const 5600) "status-many(ids) with a list<string> pointer not aligned to 4")
  (data (i32.const 5696) "status(id) with an id that is not valid UTF-8")
  (data (i32.const 5792) "spawn with a cabi_realloc that returns an out-of-bounds pointer")
  (data (i32.const 5888) "os-pid on a handle that was never issued")
  (data (i32.const 5984) "os-pid on handle 0 (the reserved null index)")
  (data (i32.const 6080) "os-pid on a handle after [resource-drop]")
  (data (i32.const 6176) "[resource-drop] twice on the same handle")
  (data (i32.const 6272) "signal(id, sig) with enum discriminant 99")
  (data (i32.const 6368) "read-since with an option discriminant of 7")
  (data (i32.const 6464) "spawn-persistent with its params pointer out of bounds")
  (data (i32.const 6560) "status(id) with a return pointer past the end of memory")
  (data (i32.const 6656) "[method]process-handle.wait with option discriminant 2")
  (data (i32.const 6752) "status(id) with a length above the ABI's 2^28-1 limit")
  (data (i32.const 7168) "{\22type\22:\22object\22}")

  ;; Bump allocator; honours align. With $evil set it answers out of bounds.
  (func $realloc (export "cabi_realloc") (param $old i32) (param $oldsz i32) (param $align i32) (param $new i32) (result i32)
    (local $p i32)
    (if (global.get $evil) (then (return (i32.const 0xFFFFFFF0))))
    (local.set $p
      (i32.and
        (i32.add (global.get $heap) (i32.sub (local.get $align) (i32.const 1)))
        (i32.sub (i32.const 0) (local.get $align))))
    (global.set $heap (i32.add (local.get $p) (local.get $new)))
    (if (i32.gt_u (global.get $heap) (i32.mul (memory.size) (i32.const 65536)))
      (then
        (if (i32.eq (memory.grow
              (i32.add (i32.shr_u (i32.sub (global.get $heap) (i32.mul (memory.size) (i32.const 65536))) (i32.const 16))
                       (i32.const 1)))
              (i32.const -1))
          (then unreachable))))
    (local.get $p))

  (func $describe (export "capsule:guest/tool@1.0.0#describe") (result i32)
    (i32.const 16))

  ;; Post-return is optional in the Canonical ABI; this guest has one (a
  ;; no-op: results are static). testdata/minimal has none.
  (func (export "cabi_post_capsule:guest/tool@1.0.0#call") (param i32))

  ;; spawn-background(/bin/sh -c "exec sleep 30") -> the own<process-handle>.
  ;; result<own<process-handle>, error-code>: disc u8 @0, payload @8
  ;; (error-code has a u64 case, so the payload is 8-aligned).
  (func $background (result i32)
    (call $spawn_background (i32.const 176) (i32.const 7) (i32.const 192) (i32.const 2)
      (i32.const 0) (i32.const 0) (i32.const 0) (i32.const 0) (i32.const 0)
      (i32.const 0) (i32.const 0) (i32.const 0) (i32.const 0) (i64.const 0) (i32.const 4096))
    (if (i32.load8_u (i32.const 4096)) (then unreachable))
    (i32.load (i32.const 4104)))

  (func $call (export "capsule:guest/tool@1.0.0#call") (param $np i32) (param $nl i32) (param $ip i32) (param $il i32) (result i32)
    (local $sel i32)
    (local $h i32)
    (local.set $sel (i32.sub (i32.load8_u (local.get $np)) (i32.const 97)))
    (global.set $heap (i32.const 8192))
    (block $done
    (block $r_len_over_limit
    (block $q_wait_bad_option
    (block $p_retptr_oob
    (block $o_params_oob
    (block $n_bad_option
    (block $m_bad_enum
    (block $l_double_drop
    (block $k_dropped_handle
    (block $j_null_handle
    (block $i_forged_handle
    (block $h_realloc_oob
    (block $g_invalid_utf8
    (block $f_misaligned_list
    (block $e_misaligned_retptr
    (block $d_len_wraps
    (block $c_len_past_memory
    (block $b_oob_string
    (block $a_ok
      (br_table $a_ok $b_oob_string $c_len_past_memory $d_len_wraps $e_misaligned_retptr $f_misaligned_list $g_invalid_utf8 $h_realloc_oob $i_forged_handle $j_null_handle $k_dropped_handle $l_double_drop $m_bad_enum $n_bad_option $o_params_oob $p_retptr_oob $q_wait_bad_option $r_len_over_limit $done (local.get $sel)))
      ;; a_ok: benign: returns {}
        (br $done))
      ;; b_oob_string: status(id) with a string pointer past the end of memory
        (call $status (i32.const 0xFFFFFF00) (i32.const 52) (i32.const 4096))
        (br $done))
      ;; c_len_past_memory: status(id) with a length that runs past memory
        (call $status (i32.const 96) (i32.const 200000) (i32.const 4096))
        (br $done))
      ;; d_len_wraps: status(id) whose pointer+length wraps around 2^32
        (call $status (i32.const 0xFFFFFFF0) (i32.const 0x20) (i32.const 4096))
        (br $done))
      ;; e_misaligned_retptr: status(id) with a return pointer not aligned to 8
        (call $status (i32.const 96) (i32.const 52) (i32.const 4097))
        (br $done))
      ;; f_misaligned_list: status-many(ids) with a list<string> pointer not aligned to 4
        (call $status_many (i32.const 289) (i32.const 1) (i32.const 4096))
        (br $done))
      ;; g_invalid_utf8: status(id) with an id that is not valid UTF-8
        (call $status (i32.const 160) (i32.const 2) (i32.const 4096))
        (br $done))
      ;; h_realloc_oob: spawn with a cabi_realloc that returns an out-of-bounds pointer
        ;; from now on cabi_realloc answers 0xFFFFFFF0; the trap discards this instance
        (global.set $evil (i32.const 1))
        (call $spawn (i32.const 176) (i32.const 7) (i32.const 208) (i32.const 2)
          (i32.const 0) (i32.const 0) (i32.const 0) (i32.const 0) (i32.const 0)
          (i32.const 0) (i32.const 0) (i32.const 0) (i32.const 0) (i64.const 0) (i32.const 4096))
        (br $done))
      ;; i_forged_handle: os-pid on a handle that was never issued
        (call $os_pid (i32.const 12345) (i32.const 4096))
        (br $done))
      ;; j_null_handle: os-pid on handle 0 (the reserved null index)
        (call $os_pid (i32.const 0) (i32.const 4096))
        (br $done))
      ;; k_dropped_handle: os-pid on a handle after [resource-drop]
        (local.set $h (call $background))
        (call $drop (local.get $h))
        (call $os_pid (local.get $h) (i32.const 4096))
        (br $done))
      ;; l_double_drop: [resource-drop] twice on the same handle
        (local.set $h (call $background))
        (call $drop (local.get $h))
        (call $drop (local.get $h))
        (br $done))
      ;; m_bad_enum: signal(id, sig) with enum discriminant 99
        (call $signal (i32.const 96) (i32.const 52) (i32.const 99) (i32.const 4096))
        (br $done))
      ;; n_bad_option: read-since with an option discriminant of 7
        (call $read_since (i32.const 96) (i32.const 52) (i32.const 0) (i32.const 7) (i32.const 0) (i32.const 0) (i32.const 16) (i32.const 4096))
        (br $done))
      ;; o_params_oob: spawn-persistent with its params pointer out of bounds
        (call $spawn_persistent (i32.const 0xFFFFFF00) (i32.const 4096))
        (br $done))
      ;; p_retptr_oob: status(id) with a return pointer past the end of memory
        (call $status (i32.const 96) (i32.const 52) (i32.const 0xFFFFFFF8))
        (br $done))
      ;; q_wait_bad_option: [method]process-handle.wait with option discriminant 2
        (local.set $h (call $background))
        (call $wait (local.get $h) (i32.const 2) (i64.const 10) (i32.const 4096))
        (br $done))
      ;; r_len_over_limit: status(id) with a length above the ABI's 2^28-1 limit
        (call $status (i32.const 96) (i32.const 0x7FFFFFFF) (i32.const 4096))
        (br $done))
    ;; a_ok, and every hostile call the host failed to trap, ends here.
    (i32.const 32))
)
