// GRUX_INTERNAL marks an internal function template whose instances are explicit
// specializations (`template <> void f<float>(...)`, the Highway-dispatched kernels): GCC gives
// those default visibility despite -fvisibility=hidden unless the template's own declaration
// says hidden, and a shared libgrux would then export them (scripts/test_package.sh checks).
#pragma once

#define GRUX_INTERNAL __attribute__((visibility("hidden")))
