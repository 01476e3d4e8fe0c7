/* runlog_private.h - what the runlog's own files share: the run lock, cleanup of what crashes leave
 *
 * Not for use outside engine/rundir/runlog*.c.
 */
#ifndef DL_RUNLOG_PRIVATE_H
#define DL_RUNLOG_PRIVATE_H

/* The last component of a path ("runs/x" -> "x"). */
const char *dl_runlog_base_name(const char *path);

/* Takes the exclusive lock on dir/run.lock (created when missing) without
 * blocking and writes "PID HOST" into it; *fd_out keeps it until closed.
 * A holder that is busy for a second makes it fail with DL_EINVAL "run
 * RUN is in use by process PID". In a folder being made (fresh), the file
 * is locked under another name and renamed: run.lock never exists
 * unlocked there, which is how a cleaner tells a live creator from a dead
 * one. */
int dl_runlog_take_lock(const char *dir, const char *run, int fresh, int *fd_out);

/* 1 when the temporary run folder dir was left by a creator that is gone. */
int dl_runlog_temp_is_stale(const char *dir);

/* Removes a temporary run folder: its files, then itself (one holding a
 * sub-folder is left alone). */
void dl_runlog_remove_temp_dir(const char *dir);

/* Removes NAME.tmp.PID files that a writer killed between its temporary
 * write and the rename left in the run folder. */
void dl_runlog_remove_stale_files(const char *run_dir);

/* Cuts a last line without its newline off dir/name; returns the bytes
 * cut (0: none, or no such file). */
long dl_runlog_cut_torn_tail(const char *dir, const char *name);

#endif
