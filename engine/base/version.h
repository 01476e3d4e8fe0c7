/* version.h - the dlbench version string */
#ifndef DL_VERSION_H
#define DL_VERSION_H
#define DL_VERSION "0.1.0"
#endif
