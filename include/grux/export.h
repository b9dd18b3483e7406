/* Which symbols libgrux (and libgrux_tools) export. Both are built with hidden visibility
 * (-fvisibility=hidden): only the public API is visible to the programs, plugins and Python
 * modules that link them, so grux's internals never clash with a host's symbols. Every public
 * C++ header opens its namespace as `namespace grux GRUX_API {`, which exports what it
 * declares; the C API (grux/grux.h) marks each function. Valid C and C++. */
#ifndef GRUX_EXPORT_H
#define GRUX_EXPORT_H

#if defined(__GNUC__) || defined(__clang__)
#define GRUX_API __attribute__((visibility("default")))
#else
#define GRUX_API
#endif

#endif /* GRUX_EXPORT_H */
