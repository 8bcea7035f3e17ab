// A C capsule for the component tests (host TestCComponent): clang
// builds it for wasm32-wasi as a reactor against Debian's wasi-libc, and
// componenttest.BuildC makes it a component with jco (componentEmbed +
// componentNew with the wasi_snapshot_preview1 reactor adapter), the
// recipe the README gives. No binding generator runs: the Canonical ABI
// glue below is written by hand, and componentNew checks every core
// signature against the WIT world capsule:guest/capsule.
//
// Tools: echo (returns its input) and persist, which runs
// {"cmd": "/bin/sh", "script": "..."} as `cmd -c script` through
// spawn-persistent, waits for it, reads its stdout with read-since and
// releases it, answering {"exit": N, "stdout": "..."}.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

// Canonical ABI memory layouts of capsule:process@1.1.0's types. C's
// natural layout on wasm32 is the Canonical ABI's for these (the
// asserts below pin it); a size mismatch would otherwise only show as
// garbage at call time.
typedef struct { const char *ptr; size_t len; } str_t;
typedef struct { void *ptr; size_t len; } list_t;
typedef struct { uint8_t some; str_t val; } opt_str_t;
typedef struct { uint8_t some; list_t val; } opt_list_t;
typedef struct { uint8_t some; uint64_t val; } opt_u64_t;
typedef struct { uint8_t some; uint32_t val; } opt_u32_t;
typedef struct { uint8_t some; int32_t val; } opt_s32_t;

typedef struct {
  str_t cmd;
  list_t args; // list<string>: str_t[]
  opt_list_t stdin_;
  list_t env;
  opt_str_t cwd;
  opt_u64_t timeout_ms;
} spawn_request_t;

typedef struct {
  opt_u64_t max_memory_bytes, max_cpu_ms;
  opt_u32_t max_pids, max_open_files;
} resource_limits_t;

typedef struct {
  opt_str_t label;
  uint8_t keep_stdin_open;
  uint8_t overflow; // overflow-policy: 0 drop-oldest
  opt_u32_t log_ring_bytes;
  opt_u64_t max_lifetime_ms, idle_timeout_ms, exit_retention_ms;
  resource_limits_t limits;
} persist_options_t;

// spawn-persistent's 35 flat parameters exceed MAX_FLAT_PARAMS (16), so
// they travel as one pointer to this tuple.
typedef struct { spawn_request_t request; persist_options_t options; } spawn_persistent_args_t;

// error-code: cases with a string payload; torn-write carries a u64.
enum { EC_CAPABILITY_DENIED, EC_INVALID_INPUT, EC_BOUNDARY_ESCAPE, EC_QUOTA, EC_TOO_LARGE,
       EC_CLOSED, EC_CANCELLED, EC_WAIT_TIMEOUT, EC_UNAVAILABLE, EC_INTERNAL,
       EC_NO_SUCH_PROCESS, EC_REGISTRY_FULL, EC_PERSIST_UNSUPPORTED, EC_TORN_WRITE };
typedef struct { uint8_t tag; union { str_t s; uint64_t n; } val; } error_code_t;
typedef struct { opt_s32_t exit_code, signal; } exit_info_t;
typedef struct { list_t data; str_t next; uint64_t bytes_dropped; uint8_t eof; } log_chunk_t;

typedef struct { uint8_t is_err; union { str_t ok; error_code_t err; } val; } result_id_t;
typedef struct { uint8_t is_err; union { exit_info_t ok; error_code_t err; } val; } result_exit_t;
typedef struct { uint8_t is_err; union { log_chunk_t ok; error_code_t err; } val; } result_chunk_t;
typedef struct { uint8_t is_err; error_code_t err; } result_unit_t;

_Static_assert(sizeof(spawn_request_t) == 64 && _Alignof(spawn_request_t) == 8, "spawn-request layout");
_Static_assert(sizeof(persist_options_t) == 120, "persist-options layout");
_Static_assert(__builtin_offsetof(spawn_persistent_args_t, options) == 64, "tuple layout");
_Static_assert(sizeof(error_code_t) == 16, "error-code layout");
_Static_assert(sizeof(result_id_t) == 24 && sizeof(result_exit_t) == 24, "result layouts");
_Static_assert(sizeof(result_chunk_t) == 40 && sizeof(result_unit_t) == 24, "result layouts");

// Lowered imports: a result wider than one flat value comes back
// through a caller-provided return area (the last parameter).
#define IMPORT(name) __attribute__((import_module("capsule:process/host@1.1.0"), import_name(name)))
IMPORT("spawn-persistent") extern void host_spawn_persistent(spawn_persistent_args_t *args, result_id_t *ret);
IMPORT("wait") extern void host_wait(const char *id, size_t id_len, uint64_t timeout_ms, result_exit_t *ret);
IMPORT("read-since") extern void host_read_since(const char *id, size_t id_len, int32_t stream,
                                                 int32_t has_cursor, const char *cursor, size_t cursor_len,
                                                 uint32_t max_bytes, result_chunk_t *ret);
IMPORT("release") extern void host_release(const char *id, size_t id_len, result_unit_t *ret);

// The host allocates every string and list it returns, and the
// parameters of an export call, through this function.
__attribute__((export_name("cabi_realloc")))
void *cabi_realloc(void *old, size_t old_size, size_t align, size_t new_size) {
  (void)old_size;
  (void)align; // malloc aligns to 16 bytes, the most any Canonical ABI type needs (8)
  void *p = realloc(old, new_size ? new_size : 1);
  if (!p) abort();
  return p;
}

// free_owned frees a string or list the host handed over. An empty one
// was never allocated: the host lowers it as (align, 0) without calling
// cabi_realloc (wit-bindgen's dangling-pointer convention), and free of
// that pointer traps.
static void free_owned(const void *ptr, size_t len) {
  if (len) free((void *)ptr);
}

// A growing output buffer.
typedef struct { char *b; size_t len, cap; } buf_t;

static void put(buf_t *o, const char *s, size_t n) {
  if (o->len + n + 1 > o->cap) {
    o->cap = (o->len + n + 1) * 2;
    o->b = realloc(o->b, o->cap);
    if (!o->b) abort();
  }
  memcpy(o->b + o->len, s, n);
  o->len += n;
}
static void puts_(buf_t *o, const char *s) { put(o, s, strlen(s)); }

static void put_int(buf_t *o, long long v) {
  char d[24];
  int i = sizeof d;
  unsigned long long u = v < 0 ? -(unsigned long long)v : (unsigned long long)v;
  do d[--i] = '0' + u % 10; while (u /= 10);
  if (v < 0) d[--i] = '-';
  put(o, d + i, sizeof d - i);
}

// put_json_string writes s as a JSON string (control bytes escaped).
static void put_json_string(buf_t *o, const char *s, size_t n) {
  static const char hex[] = "0123456789abcdef";
  puts_(o, "\"");
  for (size_t i = 0; i < n; i++) {
    unsigned char c = s[i];
    if (c == '"' || c == '\\') { char e[2] = {'\\', c}; put(o, e, 2); }
    else if (c == '\n') puts_(o, "\\n");
    else if (c < 0x20) { char e[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]}; put(o, e, 6); }
    else put(o, (const char *)&c, 1);
  }
  puts_(o, "\"");
}

// json_field finds "key":"value" at the top of a flat JSON object and
// returns the value unescaped (\" \\ \n \t) in a new buffer, or NULL.
// Enough for this capsule's input; a real capsule would use a parser.
static char *json_field(const char *in, size_t n, const char *key) {
  size_t k = strlen(key);
  for (size_t i = 0; i + k + 2 < n; i++) {
    if (in[i] != '"' || strncmp(in + i + 1, key, k) != 0 || in[i + 1 + k] != '"') continue;
    size_t j = i + k + 2;
    while (j < n && (in[j] == ' ' || in[j] == ':')) j++;
    if (j >= n || in[j] != '"') return NULL;
    char *v = malloc(n - j + 1), *w = v;
    for (j++; j < n && in[j] != '"'; j++) {
      char c = in[j];
      if (c == '\\' && j + 1 < n) {
        c = in[++j];
        c = c == 'n' ? '\n' : c == 't' ? '\t' : c;
      }
      *w++ = c;
    }
    *w = 0;
    return v;
  }
  return NULL;
}

static const char *error_names[] = {
  "capability-denied", "invalid-input", "boundary-escape", "quota", "too-large", "closed",
  "cancelled", "wait-timeout", "unavailable", "internal", "no-such-process", "registry-full",
  "persist-unsupported", "torn-write"};

// put_error describes an error-code and frees its string payload.
static void put_error(buf_t *o, const char *fn, error_code_t *e) {
  puts_(o, fn);
  puts_(o, ": ");
  puts_(o, e->tag < sizeof error_names / sizeof *error_names ? error_names[e->tag] : "?");
  switch (e->tag) {
  case EC_CAPABILITY_DENIED: case EC_INVALID_INPUT: case EC_BOUNDARY_ESCAPE:
  case EC_TOO_LARGE: case EC_UNAVAILABLE: case EC_INTERNAL:
    puts_(o, ": ");
    put(o, e->val.s.ptr, e->val.s.len);
    free_owned(e->val.s.ptr, e->val.s.len);
    break;
  case EC_TORN_WRITE:
    puts_(o, ": ");
    put_int(o, (long long)e->val.n);
  }
}

// persist runs the script as a persistent process and reports its exit
// and stdout; it returns 0 on success, 1 with the error text in o.
static int persist(buf_t *o, const char *input, size_t n) {
  char *cmd = json_field(input, n, "cmd"), *script = json_field(input, n, "script");
  if (!script) { puts_(o, "persist: input needs a \"script\" string"); free(cmd); return 1; }
  if (!cmd) cmd = strdup("/bin/sh");
  str_t args[2] = {{"-c", 2}, {script, strlen(script)}};
  spawn_persistent_args_t a = {0}; // every option none, drop-oldest
  a.request.cmd = (str_t){cmd, strlen(cmd)};
  a.request.args = (list_t){args, 2};
  a.request.env = (list_t){NULL, 0};
  a.options.label = (opt_str_t){1, {"c-capsule", 9}};
  static result_id_t rid;
  host_spawn_persistent(&a, &rid);
  free(cmd);
  free(script);
  if (rid.is_err) { put_error(o, "spawn-persistent", &rid.val.err); return 1; }
  str_t id = rid.val.ok;
  int failed = 1;
  static result_exit_t rexit;
  static result_chunk_t rchunk;
  static result_unit_t runit;
  host_wait(id.ptr, id.len, 10000, &rexit);
  if (rexit.is_err) { put_error(o, "wait", &rexit.val.err); goto release; }
  host_read_since(id.ptr, id.len, 0 /* stdout */, 0, NULL, 0, 65536, &rchunk);
  if (rchunk.is_err) { put_error(o, "read-since", &rchunk.val.err); goto release; }
  host_release(id.ptr, id.len, &runit);
  if (runit.is_err) {
    put_error(o, "release", &runit.err);
  } else {
    puts_(o, "{\"exit\":");
    put_int(o, rexit.val.ok.exit_code.some ? rexit.val.ok.exit_code.val : -1);
    puts_(o, ",\"id_len\":");
    put_int(o, (long long)id.len);
    puts_(o, ",\"stdout\":");
    put_json_string(o, rchunk.val.ok.data.ptr, rchunk.val.ok.data.len);
    puts_(o, "}");
    failed = 0;
  }
  free_owned(rchunk.val.ok.data.ptr, rchunk.val.ok.data.len);
  free_owned(rchunk.val.ok.next.ptr, rchunk.val.ok.next.len);
  goto out;
release: // a failed wait or read still releases the process
  host_release(id.ptr, id.len, &runit);
  if (runit.is_err) { puts_(o, "; "); put_error(o, "release", &runit.err); }
out:
  free_owned(id.ptr, id.len);
  return failed;
}

// capsule:guest/tool@1.0.0 exports.
typedef struct { str_t name, description, input_schema; } tool_spec_t;
#define S(lit) {lit, sizeof lit - 1}
static const tool_spec_t tools[] = {
  {S("echo"), S("c echo"), S("{\"type\":\"object\"}")},
  {S("persist"), S("c persistent process"), S("{\"type\":\"object\",\"properties\":{\"cmd\":{\"type\":\"string\"},\"script\":{\"type\":\"string\"}},\"required\":[\"script\"]}")},
};

// describe's list<tool-spec> is two flat values, more than
// MAX_FLAT_RESULTS (1): it returns a pointer to (ptr, len). The specs are
// static, so there is no post-return to free them.
__attribute__((export_name("capsule:guest/tool@1.0.0#describe")))
list_t *describe(void) {
  static list_t ret = {(void *)tools, sizeof tools / sizeof *tools};
  return &ret;
}

static struct { uint8_t is_err; str_t val; } call_ret;
_Static_assert(sizeof call_ret == 12, "result<string, string> layout");

// call owns name and input (the host allocated them with cabi_realloc).
__attribute__((export_name("capsule:guest/tool@1.0.0#call")))
void *call(char *name, size_t name_len, char *input, size_t input_len) {
  buf_t o = {0};
  int err = 0;
  if (name_len == 4 && memcmp(name, "echo", 4) == 0) {
    put(&o, input, input_len);
  } else if (name_len == 7 && memcmp(name, "persist", 7) == 0) {
    err = persist(&o, input, input_len);
  } else {
    puts_(&o, "no such tool: ");
    put(&o, name, name_len);
    err = 1;
  }
  free_owned(name, name_len);
  free_owned(input, input_len);
  call_ret.is_err = err;
  call_ret.val = (str_t){o.b, o.len};
  return &call_ret;
}

// After the host has read call's result, it frees the string.
__attribute__((export_name("cabi_post_capsule:guest/tool@1.0.0#call")))
void call_post_return(void *ret) {
  (void)ret;
  free((void *)call_ret.val.ptr);
  call_ret.val = (str_t){0};
}
