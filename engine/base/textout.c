/* textout.c - CSV fields, numbers and JSON strings for files other tools read */
#include "engine/base/textout.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void dl_csv_field(FILE *f, const char *s)
{
    if (!s[strcspn(s, ",\"\r\n")]) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"')
            fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

void dl_csv_number(FILE *f, double v)
{
    if (!isfinite(v))
        return;
    char a[40], b[40];
    snprintf(a, sizeof a, "%.15g", v);
    if (strtod(a, NULL) == v) { /* the short form when it reads back the same */
        fputs(a, f);
        return;
    }
    snprintf(b, sizeof b, "%.17g", v);
    fputs(b, f);
}

void dl_csv_json(FILE *f, const cJSON *v)
{
    if (!v || cJSON_IsNull(v))
        return;
    if (cJSON_IsString(v)) {
        dl_csv_field(f, v->valuestring);
    } else if (cJSON_IsNumber(v)) {
        dl_csv_number(f, v->valuedouble);
    } else if (cJSON_IsBool(v)) {
        fputs(cJSON_IsTrue(v) ? "true" : "false", f);
    } else {
        char *t = cJSON_PrintUnformatted(v);
        dl_csv_field(f, t ? t : "");
        free(t);
    }
}

void dl_json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}
