// Whether this file is compiled under a sanitizer: GRUX_ASAN (AddressSanitizer) and GRUX_TSAN
// (ThreadSanitizer), 0 or 1. GCC defines __SANITIZE_ADDRESS__ / __SANITIZE_THREAD__; clang
// before 16 defines neither and answers __has_feature instead.
#pragma once

#if defined(__SANITIZE_ADDRESS__)
#define GRUX_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define GRUX_ASAN 1
#endif
#endif
#ifndef GRUX_ASAN
#define GRUX_ASAN 0
#endif

#if defined(__SANITIZE_THREAD__)
#define GRUX_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define GRUX_TSAN 1
#endif
#endif
#ifndef GRUX_TSAN
#define GRUX_TSAN 0
#endif
