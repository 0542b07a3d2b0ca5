/* doc_file.h: the command line of a tool that generates a whole doc file from a list in the
 * code: print it, write it (-o FILE), or check that the committed FILE is still what the list
 * makes (--check FILE). */
#ifndef KS_DOC_FILE_H
#define KS_DOC_FILE_H

#include <stdio.h>

/* Runs the tool: write(f) writes the doc. what names the list it comes from, regen the
 * command that regenerates it (both for --check's message). Returns the exit code: 0, 1 when
 * --check found FILE stale (or unreadable), 2 on a usage error. */
int ks_doc_file_main(int argc, char **argv, void (*write)(FILE *f), const char *what,
                     const char *regen);

#endif
