/* A stand-in for Windows' bcryptprimitives.dll, for running the unit tests under Wine only.
 *
 * Rust's standard library (since 1.78) takes randomness from ProcessPrng in
 * bcryptprimitives.dll, which Windows 10 and later have and Debian's Wine 8.0 does not: every
 * Rust test binary fails to load there. This DLL gives ProcessPrng over RtlGenRandom
 * (SystemFunction036), which Wine has. It is never shipped or linked into Ferry. */
#include <windows.h>

BOOLEAN WINAPI SystemFunction036(PVOID buffer, ULONG len);

__declspec(dllexport) BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T len) {
    while (len > 0) {
        ULONG chunk = len > 0x10000000 ? 0x10000000 : (ULONG)len;
        if (!SystemFunction036(data, chunk)) {
            return FALSE;
        }
        data += chunk;
        len -= chunk;
    }
    return TRUE;
}
