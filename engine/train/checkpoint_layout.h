/* checkpoint_layout.h - the tensor table of a checkpoint: built from a model, written as the layout attribute, parsed back, compared
 *
 * Private to engine/train/checkpoint.c. Version 1 layouts list the
 * parameters as "NAME OFFSET COUNT" lines; version 2 lists parameters and
 * buffers with their shapes ("param NAME OFFSET COUNT D0,D1", "buffer
 * ..."). Both start with "count P buffers B".
 */
#ifndef DL_CHECKPOINT_LAYOUT_H
#define DL_CHECKPOINT_LAYOUT_H

#include "engine/train/checkpoint.h"

/* The model's tensors (parameters, then buffers) into a malloc'd table *t
 * of *n entries. DL_ENOMEM on failure. */
int dl_checkpoint_layout_of_model(const dl_model *m, dl_checkpoint_tensor **t, int *n);

/* The layout text of version (1 or 2) for table t and the region sizes:
 * malloc'd, NULL when out of memory. Version 1 leaves out the buffers. */
char *dl_checkpoint_layout_text(const dl_checkpoint_tensor *t, int n, size_t count,
                                size_t buffer_count, int version);

/* Parses a layout text of version into c->tensors / ntensors, c->count and
 * c->buffer_count. DL_EINVAL naming path and the line for a malformed
 * text, or one whose tensors lie outside their region. */
int dl_checkpoint_layout_parse(const char *path, const char *text, int version,
                               dl_checkpoint_contents *c);

/* Whether the checkpoint c (read from path) holds the state of model m:
 * DL_OK, or DL_EINVAL naming the first tensor that differs (missing on
 * either side, another shape or size, another place in the arena). */
int dl_checkpoint_layout_match(const char *path, const dl_checkpoint_contents *c,
                               const dl_model *m);

#endif
