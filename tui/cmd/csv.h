/* csv.h - CSV fields and JSON values written for the export commands (RFC 4180 quoting)
 */
#ifndef DL_CSV_H
#define DL_CSV_H

#include <stdio.h>

#include <cjson/cJSON.h>

/* One field: quoted (with "" for ") when it holds a comma, quote, CR or
 * LF; as is otherwise. */
void dl_csv_field(FILE *f, const char *s);
/* A number with all its digits ("%.17g" trimmed), nothing for NaN. */
void dl_csv_number(FILE *f, double v);
/* A JSON leaf as a field: strings as text, numbers as dl_csv_number,
 * booleans true/false, null and NULL empty, objects and arrays as JSON. */
void dl_csv_json(FILE *f, const cJSON *v);

#endif
