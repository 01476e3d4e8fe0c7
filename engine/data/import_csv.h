/* import_csv.h - a CSV file (header, numeric features, one label column) as an import split */
#ifndef DL_IMPORT_CSV_H
#define DL_IMPORT_CSV_H

#include "engine/data/import.h"

/* Reads path as the /train split of im: x f32 [rows, columns - 1], the
 * label column chosen by label (a header name, or a 0-based index). Labels
 * that are all integers in 0..999999 become i32 classes (largest + 1),
 * other numbers f32 targets, anything else string classes: their sorted
 * distinct names go to im->names. Blank lines are skipped; fields may be
 * quoted with "" escapes. Bad input (no label given, empty file, ragged
 * rows, a feature that is not a finite number, too many distinct labels)
 * is DL_EINVAL with a message "path:line: ..."; an unreadable file DL_EIO;
 * DL_ENOMEM when memory runs out. On error im gains no split. Sets
 * im->origin. */
int dl_import_csv_load(dl_import *im, const char *path, const char *label);

/* As dl_import_csv_load, but the label column is always f32 regression
 * targets (y f32 [rows], no classes), integers too; a target that is not
 * a finite number is DL_EINVAL "path:line: target ... is not a number". */
int dl_import_csv_load_targets(dl_import *im, const char *path, const char *label);

/* Reads path's rows as features for a model to predict from: x f32
 * [rows, columns] (label NULL), or every column but label's (a header
 * name or 0-based index) when the file has one; the first line is a
 * header when a field of it is not a number. d gets zero i32 labels (y
 * width 1, no classes), scale 1; the caller frees d->x and d->y. Errors
 * as dl_import_csv_load's; d is then empty. */
int dl_import_csv_features(const char *path, const char *label, dl_dataset *d);

#endif
