# shellcheck shell=bash
# The kernel-report pattern, the one definition: an extended regex (grep -E) matching a line of
# the kernel log that reports a kernel problem. A test, a smoke test or an fstests run fails
# when the kernel log gained a line it matches. Sourced by tests/run.sh, tests/smoke.sh (also
# copied beside it into the arm64 guest's root), scripts/guest/guest-fstests.sh and
# scripts/vm/arm64-boot.sh (which greps the console too).
#
#   warnings and bugs     WARNING:, BUG:, kernel BUG, Oops, general protection, "cut here",
#                         Unable to handle kernel (arm64's faults), Kernel panic, stack-protector
#   sanitizers            KASAN, UBSAN, kmemleak
#   lockdep               circular and recursive locking, inconsistent lock state, lockdep's own
#   sleeping in atomic    sleeping function called from invalid context, scheduling while atomic
#   hung tasks            INFO: task ... blocked (for more than N seconds), hung_task
#   the allocator         slub_debug's "BUG <cache> (...)", Poison/Redzone/Object padding
#                         overwritten, Freepointer corrupt
#   sysfs                 cannot create duplicate filename (a second device of one name)
# shellcheck disable=SC2034 # used by the files that source it
SPLAT='WARNING:|BUG:|kernel BUG|Oops|general protection|cut here|Unable to handle kernel|Kernel panic|stack-protector'\
'|KASAN|UBSAN|kmemleak'\
'|possible circular locking|possible recursive locking|inconsistent lock state|lockdep'\
'|sleeping function called from invalid context|scheduling while atomic'\
'|INFO: task .* blocked|blocked for more than|hung_task'\
'|BUG [^ ]+ \(|Poison overwritten|Redzone overwritten|Object padding overwritten|Freepointer corrupt'\
'|cannot create duplicate filename'
