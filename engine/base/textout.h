/* textout.h - text written for other tools: CSV fields (RFC 4180 quoting), numbers with all their digits, JSON strings
 */
#ifndef DL_TEXTOUT_H
#define DL_TEXTOUT_H

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
/* s as a JSON string: quotes, backslashes and control characters
 * escaped, UTF-8 passed through. */
void dl_json_string(FILE *f, const char *s);

#endif
