/* text.h - token files (dlbench import --text) as batch sources of context windows; their vocabulary
 *
 * The file (written by import_text.c): one group per split (/train, /test,
 * optionally /val) holding a 1-D dataset "tokens" (u8 or u16), the token
 * ids of the split's text in order; root attributes kind = "text",
 * vocab_kind = "bytes" | "chars", vocab_size, vocab (chars only: one UTF-8
 * string, the characters in id order) and sources.
 *
 * A sample is a window of context T: x = ids[p .. p+T-1] as f32 [T] (what
 * nn.Embedding reads), y = ids[p+1 .. p+T] as i32 [T]. Training windows sit
 * at positions drawn by the counter RNG from (seed, epoch, sample index),
 * with replacement, so start_epoch(epoch, skip) continues a run exactly;
 * without shuffle (validation) the windows are the split's non-overlapping
 * windows p = k*T in order.
 *
 * Two modes, the same windows in both. In memory: the split's ids are read
 * once (2 bytes a token) under the HDF5 lock when the source opens, and
 * checked against the vocabulary. Streaming (a split larger than the
 * memory budget): the dataset stays open and each window is one hyperslab
 * read of T + 1 ids, with no chunk cache for raw chunks (a random window
 * costs its own bytes, not its chunk's; compressed chunks get a cache of 4,
 * and a random window then costs a chunk's inflation), the lock held for
 * a batch; ids are checked as they are read. Batches are assembled in the caller's thread: in memory a
 * copy and a conversion of batch*T values, which no worker thread would
 * pay for; streaming, a read per window (a worker that reads ahead is what
 * a split on a slow disk would want next).
 */
#ifndef DL_TEXT_H
#define DL_TEXT_H

#include <stddef.h>
#include <stdint.h>

#include "engine/core/backend.h"
#include "engine/data/data.h"

#define DL_TEXT_MAX_VOCAB 65536

/* A text file's vocabulary. */
typedef struct dl_text_vocab {
    int chars;    /* 1: ids are the code points of cp; 0: bytes, id = byte */
    int size;     /* vocab_size */
    uint32_t *cp; /* chars: [size] code points in id order (owned); NULL for bytes */
} dl_text_vocab;

/* Reads path's root attributes into v (zeroed first). Errors: DL_EINVAL
 * "PATH: no such file", "PATH: not an HDF5 file", "PATH: not a text data
 * file (no kind = \"text\" attribute; make one with dlbench import --text)",
 * or a vocabulary that does not agree with itself; v is then empty. */
int dl_text_vocab_read(dl_text_vocab *v, const char *path);

/* Frees v's code points; v is zeroed. NULL is fine. */
void dl_text_vocab_done(dl_text_vocab *v);

/* The UTF-8 bytes of token id into out (1 to 4 bytes; bytes: the byte
 * itself). Returns the length, 0 for an id outside the vocabulary. */
int dl_text_vocab_decode(const dl_text_vocab *v, int id, char out[4]);

/* The ids of text[0..len) into ids[0..max): one per byte (bytes) or per
 * character (chars). Returns how many, or DL_EINVAL naming the byte offset
 * of invalid UTF-8 or of a character that is not in the vocabulary, or
 * of the first id that does not fit in max. */
long dl_text_vocab_encode(const dl_text_vocab *v, const char *text, size_t len, int32_t *ids,
                          size_t max);

/* Decodes one UTF-8 character of s[0..n) (n >= 1) into *cp: returns its
 * length (1-4), or 0 for an invalid sequence (a stray continuation byte,
 * an overlong form, a surrogate, above U+10FFFF, or cut short by n). */
int dl_utf8_decode(const unsigned char *s, size_t n, uint32_t *cp);

/* Encodes cp (<= U+10FFFF) as UTF-8 into out; returns the length (1-4). */
int dl_utf8_encode(uint32_t cp, char out[4]);

typedef enum {
    DL_TEXT_AUTO = 0, /* in memory when the split fits memory_budget, else streaming */
    DL_TEXT_MEMORY,
    DL_TEXT_STREAM
} dl_text_mode;

typedef struct dl_text_options {
    const char *path;  /* the .h5 file */
    const char *group; /* "/train" */
    int context;       /* T >= 1; the split must hold at least T + 1 tokens */
    int batch;         /* samples per batch (>= 1) */
    int shuffle;       /* random window positions; else the fixed windows in order */
    int drop_last;     /* skip a short last batch */
    uint64_t seed;     /* the positions' key */
    size_t limit;      /* > 0: windows per epoch (fixed windows: at most that many) */
    dl_text_mode mode;
    size_t memory_budget; /* bytes the split's ids may take; 0: half the physical memory */
    dl_backend *be;       /* batch buffers from be->ops->host_alloc; NULL: malloc */
} dl_text_options;

/* Opens o->path:o->group and returns a source over it in *out (epoch 0
 * started). Windows per epoch: limit when set (capped by the fixed
 * windows' number without shuffle), else (tokens - 1) / T, the number of
 * non-overlapping windows. info: sample [T] f32, y i32 of width T,
 * classes = vocab_size, scale 1. Errors (DL_EINVAL, naming the file and
 * the group or field): a file that is not a text file, a missing group or
 * tokens dataset, a tokens dataset that is not 1-D u8/u16, an id at or
 * above vocab_size (streaming: met by next(), DL_EINVAL with the same
 * message), context < 1 or longer than the split allows; *out is then
 * NULL. A read error while streaming is DL_EIO from next(). */
int dl_source_text(dl_source **out, const dl_text_options *o);

/* "memory" or "streaming" for a text source, NULL for another source. */
const char *dl_source_text_mode(const dl_source *s);

/* The position of sample k of an epoch of a shuffled source: Philox block
 * (seed, DL_STREAM_SHUFFLE + 1, epoch, k) mapped onto [0, tokens - T).
 * Exposed for tests and for a peer that must draw the same windows. */
size_t dl_text_position(uint64_t seed, int epoch, size_t k, size_t tokens, int context);

#endif
