/* cmd_import.c - `dlbench import`: arguments, the choice of importer, the summary */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/base/clock.h"
#include "engine/base/error.h"
#include "engine/base/fsutil.h"
#include "engine/data/data.h"
#include "engine/data/h5write.h"
#include "engine/data/import.h"
#include "engine/data/import_cifar.h"
#include "engine/data/import_csv.h"
#include "engine/data/import_idx.h"
#include "engine/data/import_images.h"
#include "engine/data/import_text.h"
#include "engine/data/inspect.h"
#include "tui/cmd/commands.h"
#include "tui/cmd/exit.h"
#include "tui/cmd/opts.h"

/* The options, then what was read. */
/* This command's row of the table (its options and help), set on entry. */
static const dl_command *this_cmd;

typedef struct import_job {
    const char *label, *synthetic, *class_names_arg, *split_name;
    double val_fraction;
    long samples, chunk;
    int classes, gzip;
    int text, chars, vocab_given; /* --text, --vocab chars, --vocab seen */
    int inspect;                  /* --inspect */
    int height, width, channels;  /* --size, --channels */
    int workers, strict;          /* --workers, --strict */
    int images;                   /* SRC was an image folder */
    int regression;               /* --regression */
    float noise;
    uint64_t seed;
    dl_import im;
} import_job;

static int fail_input(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int fail_input(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "dlbench import: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    return 2;
}

/* Names the error; the exit status from the one map (bad input 2, the rest 1). */
static int report(int rc)
{
    fprintf(stderr, "dlbench import: %s\n", dl_error_message());
    return dl_exit_for(rc);
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcasecmp(s + n - m, suffix) == 0;
}

static int is_dir(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static int is_file(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

static int parse_long(const char *opt, const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || end == s || v < lo || v > hi)
        return fail_input("%s: \"%s\", expected an integer in %ld..%ld", opt, s, lo, hi);
    *out = v;
    return 0;
}

/* The output's folder must exist (it is not made: a typo in the path
 * should not create folders) and OUT must not be a folder. Returns 0 or
 * the exit status 2 after saying why. */
static int check_output(const char *out)
{
    char dir[1100];
    if (snprintf(dir, sizeof dir, "%s", out) >= (int)sizeof dir)
        return fail_input("%s: path too long", out);
    char *slash = strrchr(dir, '/');
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else if (slash == dir)
        slash[1] = 0;
    else
        *slash = 0;
    if (!is_dir(dir))
        return fail_input("%s: the folder %s does not exist (create it first)", out, dir);
    if (is_dir(out))
        return fail_input("%s: is a folder; expected the path of the .h5 file to write", out);
    return 0;
}

/* Set by SIGINT / SIGTERM while an image folder is imported. */
static volatile sig_atomic_t interrupted;

static void on_interrupt(int sig)
{
    (void)sig;
    interrupted = 1;
}

/* A bar on a terminal, else a line every 5 s (stderr). */
static void image_progress(void *ctx, size_t done, size_t total)
{
    static double last;
    double now = dl_clock_mono_s();
    int tty = ctx != NULL;
    if (done < total && now - last < (tty ? 0.1 : 5.0))
        return;
    if (last == 0 && !tty) {
        last = now; /* the first line after 5 s, not at once */
        return;
    }
    last = now;
    double f = total ? (double)done / (double)total : 1;
    if (tty) {
        char bar[31];
        int k = (int)(f * 30);
        for (int i = 0; i < 30; i++)
            bar[i] = i < k ? '#' : '.';
        bar[30] = 0;
        fprintf(stderr, "\rdecoding [%s] %zu/%zu images ", bar, done, total);
        if (done == total)
            fprintf(stderr, "\r\033[K");
    } else if (done < total) {
        fprintf(stderr, "dlbench import: decoded %zu of %zu images (%.0f%%)\n", done, total,
                100 * f);
    }
    fflush(stderr);
}

/* The skipped entries' count and the first few, on stderr. */
static void print_skips(const dl_images_report *rep)
{
    if (rep->skipped == 0)
        return;
    fprintf(stderr, "dlbench import: skipped %zu entr%s (imported %zu images):\n", rep->skipped,
            rep->skipped == 1 ? "y" : "ies", rep->images);
    for (int i = 0; i < rep->shown; i++)
        fprintf(stderr, "  %s\n", rep->what[i]);
    if (rep->skipped > (size_t)rep->shown)
        fprintf(stderr, "  ... and %zu more\n", rep->skipped - (size_t)rep->shown);
}

/* An image folder, decoded on --workers threads; Ctrl-C stops it. */
static int load_images(import_job *job, const char *src)
{
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    dl_images_options o = {.height = job->height,
                           .width = job->width,
                           .channels = job->channels,
                           .val_fraction = job->val_fraction,
                           .seed = job->seed,
                           .workers = job->workers ? job->workers
                                      : ncpu < 1   ? 1
                                      : ncpu > 8   ? 8
                                                   : (int)ncpu,
                           .strict = job->strict,
                           .progress = image_progress,
                           .ctx = isatty(2) ? (void *)stderr : NULL,
                           .cancel = &interrupted};
    dl_images_report rep;
    job->images = 1;
    job->val_fraction = 0; /* taken here, per class */
    int rc = dl_import_images_dir(&job->im, src, &o, &rep);
    print_skips(&rep);
    return rc;
}

/* SRC: a folder of CIFAR batches, images or IDX files, a CSV file or an IDX images file. */
static int load_source(import_job *job, const char *src)
{
    dl_import *im = &job->im;
    if (is_dir(src) && dl_import_cifar_kind(src))
        return dl_import_cifar_dir(im, src, job->label);
    if (is_dir(src) && dl_import_images_is_folder(src))
        return load_images(job, src);
    if (is_dir(src))
        return dl_import_idx_dir(im, src);
    if (!is_file(src))
        return dl_error(DL_EINVAL, "%s: no such file or folder", src);
    if (ends_with(src, ".csv.gz"))
        return dl_error(DL_EINVAL, "%s: gzipped CSV is not supported; gunzip it first", src);
    if (ends_with(src, ".csv"))
        return job->regression ? dl_import_csv_load_targets(im, src, job->label)
                               : dl_import_csv_load(im, src, job->label);
    if (job->regression)
        return dl_error(DL_EINVAL, "%s: --regression applies to a CSV file", src);
    return dl_import_idx_images(im, job->split_name, src);
}

/* Fills job->im from the paths (all but OUT.h5). Returns 0, or the exit
 * status after saying why. */
static int load(import_job *job, int npos, char **pos)
{
    int rc;
    if (job->synthetic) {
        if (npos != 1)
            return fail_input("--synthetic takes only OUT.h5 (got %d paths)", npos);
        rc = dl_import_synthetic(&job->im, job->synthetic, job->samples, job->classes, job->noise,
                                 job->seed);
    } else if (npos == 3) {
        const char *sp = job->split_name ? job->split_name : dl_import_idx_split_of(pos[0]);
        rc = dl_import_idx_pair(&job->im, sp, pos[0], pos[1]);
    } else if (npos == 2) {
        rc = load_source(job, pos[0]);
    } else {
        dl_command_usage(this_cmd, stderr);
        return DL_EXIT_USAGE;
    }
    if (rc < 0 && interrupted)
        return fprintf(stderr, "dlbench import: interrupted; nothing written\n"),
               DL_EXIT_INTERRUPTED;
    if (rc < 0)
        return report(rc);
    if (!job->images && (job->height || job->channels || job->workers || job->strict))
        return fail_input("--size, --channels, --workers and --strict apply to image folders");
    if (job->split_name && npos != 3 && (npos != 2 || job->im.nsplits != 1))
        return fail_input("--split applies to a single IDX pair");
    return 0;
}

static void print_summary(const dl_import *im, const char *out)
{
    printf("wrote %s (%s)\n", out, im->origin);
    for (int i = 0; i < im->nsplits; i++) {
        const dl_data_info *in = &im->sp[i].d.info;
        char shape[64];
        printf("  /%-5s %8zu x %s %s, y %s", im->sp[i].name, in->count,
               dl_shape_format(&in->sample, shape, sizeof shape), dl_dtype_name(in->x_dtype),
               dl_dtype_name(in->y_dtype));
        if (in->classes)
            printf(", %d classes", in->classes);
        printf("\n");
    }
}

static int run_import(import_job *job, int npos, char **pos)
{
    const char *out = pos[npos - 1];
    int rc;
    if ((rc = check_output(out)) != 0 || (rc = load(job, npos, pos)) != 0)
        return rc;
    rc = dl_import_prepare(&job->im, job->class_names_arg, job->val_fraction, job->seed);
    if (rc < 0)
        return report(rc);

    /* write beside the target, then rename: never a torn OUT.h5 */
    char tmp[1100];
    if (dl_fs_tmp_name(out, tmp, sizeof tmp) < 0)
        return fail_input("%s: path too long", out);
    rc = dl_h5write_import(tmp, &job->im, job->chunk, job->gzip);
    if (rc < 0 || interrupted)
        unlink(tmp);
    else
        rc = dl_fs_commit(tmp, out);
    if (interrupted) {
        fprintf(stderr, "dlbench import: interrupted; %s not written\n", out);
        return DL_EXIT_INTERRUPTED;
    }
    if (rc < 0) {
        fprintf(stderr, "dlbench import: %s\n", dl_error_message());
        return 1;
    }
    print_summary(&job->im, out);
    return 0;
}

/* "\rreading 2.1 of 2.6 MB" on stderr while the files are read (a terminal
 * only), at most ten times a second. */
static void text_progress(void *ctx, const char *what, size_t done, size_t total)
{
    static double last;
    double now = dl_clock_mono_s();
    if (now - last < 0.1 && done < total)
        return;
    last = now;
    fprintf(stderr, "\r%s %.1f of %.1f MB ", what, (double)done / 1e6, (double)total / 1e6);
    fflush(stderr);
}

/* --text FILE|DIR... OUT.h5: the text importer writes OUT.h5 atomically. */
static int run_text(const import_job *job, int npos, char **pos)
{
    const char *out = pos[npos - 1];
    int rc = check_output(out);
    if (rc != 0)
        return rc;
    if (npos < 2)
        return fail_input("--text needs FILE|DIR... and OUT.h5");
    dl_text_import_options o = {.chars = job->chars,
                                .val_fraction = job->val_fraction > 0 ? job->val_fraction : 0.1,
                                .gzip = job->gzip,
                                .progress = isatty(2) ? text_progress : NULL};
    dl_text_import_summary sum;
    rc = dl_import_text((const char *const *)pos, npos - 1, out, &o, &sum);
    if (o.progress)
        fprintf(stderr, "\r\033[K");
    if (rc < 0)
        return report(rc);
    printf("wrote %s: %zu tokens (train %zu, test %zu), vocab %d %s, from %d file%s\n", out,
           sum.tokens, sum.train, sum.test, sum.vocab, sum.chars ? "chars" : "bytes", sum.files,
           sum.files == 1 ? "" : "s");
    return 0;
}

/* --inspect FILE.h5: what it holds, on stdout. */
static int run_inspect(const import_job *job, int npos, char **pos)
{
    if (job->text || job->synthetic)
        return fail_input("--inspect takes only FILE.h5 (not --text or --synthetic)");
    if (npos != 1)
        return fail_input("--inspect takes one FILE.h5 (got %d paths)", npos);
    int rc = dl_data_inspect(pos[0], stdout);
    return rc < 0 ? report(rc) : 0;
}

/* The command line into job and pos[0..*npos): returns -1 to go on, else
 * the exit status (0 for --help). */
static int parse_fraction(import_job *job, const char *val)
{
    char *end;
    job->val_fraction = strtod(val, &end);
    if (!*val || *end || !(job->val_fraction > 0 && job->val_fraction < 1))
        return fail_input("--val-fraction \"%s\": expected a number in (0, 1)", val);
    return -1;
}

/* --size HxW (or one number for a square). */
static int parse_size(import_job *job, const char *val)
{
    char *end;
    long h = strtol(val, &end, 10), w = h;
    if (*end == 'x' || *end == 'X')
        w = strtol(end + 1, &end, 10);
    if (*end || h < 1 || w < 1 || h > 32768 || w > 32768)
        return fail_input("--size \"%s\": expected HxW (e.g. 32x32), sides 1..32768", val);
    job->height = (int)h;
    job->width = (int)w;
    return -1;
}

static int parse_noise(import_job *job, const char *val)
{
    char *end;
    job->noise = strtof(val, &end);
    if (!*val || *end || !(job->noise >= 0 && job->noise < 100))
        return fail_input("--noise \"%s\": expected a number >= 0", val);
    return -1;
}

/* Takes one option into *job: -1 to go on, else the exit status. */
static int take_option(import_job *job, const dl_opt *o, const char *val)
{
    long v = 0;
    int bad = 0;
    switch (o->id) {
    case DL_OPT_HELP: dl_command_usage(this_cmd, stdout); return DL_EXIT_OK;
    case DL_OPT_LABEL: job->label = val; break;
    case DL_OPT_TEXT: job->text = 1; break;
    case DL_OPT_INSPECT: job->inspect = 1; break;
    case DL_OPT_VOCAB:
        if (strcmp(val, "bytes") && strcmp(val, "chars"))
            return fail_input("--vocab \"%s\": expected bytes or chars", val);
        job->chars = !strcmp(val, "chars");
        job->vocab_given = 1;
        break;
    case DL_OPT_SYNTHETIC: job->synthetic = val; break;
    case DL_OPT_CLASS_NAMES: job->class_names_arg = val; break;
    case DL_OPT_SPLIT:
        job->split_name = val;
        if (strcmp(val, "train") && strcmp(val, "test") && strcmp(val, "val"))
            return fail_input("--split \"%s\": expected train, test or val", val);
        break;
    case DL_OPT_VAL_FRACTION: return parse_fraction(job, val);
    case DL_OPT_NOISE: return parse_noise(job, val);
    case DL_OPT_SIZE: return parse_size(job, val);
    case DL_OPT_STRICT: job->strict = 1; break;
    case DL_OPT_REGRESSION: job->regression = 1; break;
    case DL_OPT_CHANNELS:
        if (strcmp(val, "1") && strcmp(val, "3"))
            return fail_input("--channels \"%s\": expected 1 (grey) or 3 (RGB)", val);
        job->channels = atoi(val);
        break;
    case DL_OPT_WORKERS:
        bad = parse_long(o->name, val, 1, 64, &v);
        job->workers = (int)v;
        break;
    case DL_OPT_SAMPLES: bad = parse_long(o->name, val, 4, 100000000, &job->samples); break;
    case DL_OPT_CLASSES:
        bad = parse_long(o->name, val, 2, 1000, &v);
        job->classes = (int)v;
        break;
    case DL_OPT_SEED:
        bad = parse_long(o->name, val, 0, INT64_MAX, &v);
        job->seed = (uint64_t)v;
        break;
    case DL_OPT_CHUNK: bad = parse_long(o->name, val, 1, 1 << 24, &job->chunk); break;
    case DL_OPT_GZIP:
        bad = parse_long(o->name, val, 0, 9, &v);
        job->gzip = (int)v;
        break;
    default: break;
    }
    return bad ? DL_EXIT_USAGE : -1;
}

/* Reads the command line into *job and the paths into pos (room for
 * argc). Returns -1 to go on, else the exit status (help printed, or a
 * usage error). */
static int parse_args(import_job *job, int argc, char **argv, char **pos, int *npos_out)
{
    int npos = 0, status = -1, id;
    dl_opts o;
    dl_command_opts(&o, this_cmd, argc, argv);
    while (status < 0 && (id = dl_opts_next(&o)) != DL_OPTS_END) {
        if (id == DL_OPTS_ERROR)
            status = DL_EXIT_USAGE;
        else if (id != DL_OPTS_ARG)
            status = take_option(job, o.opt, o.value);
        else
            pos[npos++] = (char *)o.value;
    }
    *npos_out = npos;
    return status;
}

/* dlbench import [options] SRC OUT.h5 | IMAGES LABELS OUT.h5 | --synthetic NAME OUT.h5
 * | --text FILE|DIR... OUT.h5.
 * Exit status 0, 2 for bad input (arguments or source data), 1 when the
 * output cannot be written. The output appears only when complete. */
int dl_cmd_import(const dl_command *self, int argc, char **argv)
{
    this_cmd = self;
    import_job *job = calloc(1, sizeof *job);
    if (!job)
        return 1;
    job->samples = 2000;
    job->classes = 2;
    job->noise = 0.1f;
    job->chars = 1;
    char **pos = calloc((size_t)argc + 1, sizeof *pos);
    int npos = 0;
    int status = pos ? parse_args(job, argc, argv, pos, &npos) : 1;
    if (status < 0 && job->inspect) {
        status = run_inspect(job, npos, pos);
    } else if (status < 0 && job->text) {
        status = job->synthetic ? fail_input("--text and --synthetic exclude each other")
                 : npos < 2     ? (dl_command_usage(this_cmd, stderr), DL_EXIT_USAGE)
                                : run_text(job, npos, pos);
    } else if (status < 0 && job->vocab_given) {
        status = fail_input("--vocab applies to --text");
    } else if (status < 0) {
        if (npos < 1 || npos > 3 || (npos == 1 && !job->synthetic) ||
            (job->synthetic && npos != 1)) {
            dl_command_usage(this_cmd, stderr);
            status = DL_EXIT_USAGE;
        } else {
            struct sigaction sa = {0}, old_int, old_term;
            sa.sa_handler = on_interrupt;
            sigemptyset(&sa.sa_mask);
            sigaction(SIGINT, &sa, &old_int);
            sigaction(SIGTERM, &sa, &old_term);
            status = run_import(job, npos, pos);
            sigaction(SIGINT, &old_int, NULL);
            sigaction(SIGTERM, &old_term, NULL);
        }
    }
    dl_import_done(&job->im);
    free(pos);
    free(job);
    return status;
}
