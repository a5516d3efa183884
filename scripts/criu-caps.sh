# Sourced by install-criu.sh and install.sh: the file capabilities a non-root user's CRIU needs
# on this machine, and granting them to a CRIU binary.
#   - CAP_CHECKPOINT_RESTORE (kernel >= 5.9), and
#   - CAP_SETPCAP when the capability bounding set is not full (containers): CRIU 4.1's restorer
#     drops every capability missing from the image's bounding set, already absent or not, and
#     PR_CAPBSET_DROP is refused without it ("Unable to drop capability 24: -1").

criu_caps() {
    local caps=cap_checkpoint_restore bnd last
    bnd=$(awk '/^CapBnd:/ {print $2}' /proc/self/status)
    last=$(cat /proc/sys/kernel/cap_last_cap)
    if [ "$((16#$bnd))" -ne "$(( (1 << (last + 1)) - 1 ))" ]; then caps=$caps,cap_setpcap; fi
    echo "$caps"
}

# criu_has_caps FILE: whether FILE carries every capability of criu_caps, effective.
criu_has_caps() {
    local have c caps
    caps=$(criu_caps)
    have=$(getcap "$1" 2>/dev/null) || return 1
    for c in ${caps//,/ }; do
        [[ $have == *"$c"* ]] || return 1
    done
    [[ $have == *"=ep"* || $have == *"+ep"* || $have == *"=eip"* ]]
}

# criu_grant FILE NAME [PREFIX]: gives FILE (called NAME in messages, which start with PREFIX)
# the capabilities (needs root and extended attributes); says so when it cannot, and goes on:
# CRIU then works for root only.
criu_grant() {
    local caps
    caps=$(criu_caps)
    setcap "$caps+ep" "$1" 2>/dev/null || {
        echo "${3:-}setcap $caps+ep on $2 failed (run as root, on a file system with extended attributes): mpicr works for root only" >&2
        return 0
    }
    echo "${3:-}$2 has $caps (for checkpoints by non-root users)"
}
