/* import_text.h - text files as a token file: files gathered, vocabulary built, split, written atomically
 *
 * The file it writes is the layout text.h reads: /train/tokens and
 * /test/tokens (u8 for bytes and for a chars vocabulary of at most 256
 * entries, else u16), root attributes format = "dlbench-text 1", kind =
 * "text", vocab_kind, vocab_size, vocab (chars), sources (one line
 * "SHA-256  path" a file, as sha256sum prints them), files, tokens,
 * train_tokens, test_tokens, created_by and origin.
 *
 * The text: the files in order, each followed by a newline if it lacked
 * one. /test is the tail of each file: its last round(F * n) tokens (n its
 * tokens, newline included), the tails in file order; /train the heads.
 * The vocabulary is that of the whole text (both splits).
 */
#ifndef DL_IMPORT_TEXT_H
#define DL_IMPORT_TEXT_H

#include <stddef.h>

/* Called as the files are read (done of total bytes) and once more when
 * writing starts (what = "writing"). */
typedef void (*dl_text_progress_fn)(void *ctx, const char *what, size_t done, size_t total);

typedef struct dl_text_import_options {
    int chars;                    /* 1: the code points seen (UTF-8 required); 0: bytes */
    double val_fraction;          /* share of each file's tail in /test, in (0, 1) */
    int gzip;                     /* 0: none, 1-9: shuffle + deflate at that level */
    dl_text_progress_fn progress; /* NULL: none */
    void *progress_ctx;
} dl_text_import_options;

/* What was written, for the summary line. */
typedef struct dl_text_import_summary {
    size_t tokens, train, test;
    int vocab, files, chars;
    double bytes; /* read from the files */
} dl_text_import_summary;

/* The files of paths[0..n): a file as it is; a folder, every regular file
 * in it (not its sub-folders) sorted by name, skipping dot-files, *.dat
 * index files (fortune's) and any file already taken (a symlink or hard
 * link to it, as fortune's *.u8 links are). Reads them, builds the token
 * ids and writes `out` through out.tmp, renamed over out only when whole.
 * Bad input is DL_EINVAL (DL_EIO for a file that cannot be read), naming
 * the file: no such file or folder, no text files found, an empty file, a
 * NUL byte (not text), invalid UTF-8 in chars mode (with its byte offset),
 * more than 65536 distinct characters, a split left with fewer than 2
 * tokens. A failure to write is DL_ERR naming out; nothing is left behind. */
int dl_import_text(const char *const *paths, int n, const char *out,
                   const dl_text_import_options *o, dl_text_import_summary *sum);

#endif
