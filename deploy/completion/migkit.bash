# bash completion for migkit (installed as
# /usr/share/bash-completion/completions/migkit). Commands and options come
# from migkit's own help text, so they never differ from it; config names
# from the config file given with -f (else /etc/migkit/config.yaml);
# machine names from `migkit-sim machines` (else from `migkit --help`).

# The names of a "Commands:" list in help text on stdin.
_migkit_help_commands() {
    sed -n '/^Commands:/,/^$/s/^  \([a-z][a-z-]*\)[ ,].*/\1/p'
}

# The config names of a mig-parted config file: the keys under mig-configs.
_migkit_config_names() {
    local f=$1
    [[ -r $f ]] || return 0
    awk '/^mig-configs:/ { in_c = 1; next }
         /^[^ #]/ { in_c = 0 }
         in_c && /^  [^ #-][^:]*:[ ]*$/ { k = $0; sub(/^  /, "", k); sub(/:[ ]*$/, "", k);
                                          gsub(/^["\x27]|["\x27]$/, "", k); print k }' "$f"
}

_migkit_machines() {
    local sim
    sim=$(command -v migkit-sim 2>/dev/null || true)
    [[ -z $sim && -x ${1%/*}/sim/bin/migkit-sim ]] && sim=${1%/*}/sim/bin/migkit-sim
    if [[ -n $sim ]]; then
        "$sim" machines 2>/dev/null | awk '{print $1}'
    else
        # the --simulate option's lines only (not the Environment text, which
        # names --simulate too, and then migkit-manager, migkit-device-plugin)
        "$1" --help 2>/dev/null | sed -n '/^ *--simulate MACHINE/,/persists/p' | tr -s ' ,()' '\n' |
            grep -x '[a-z0-9]*-[a-z0-9-]*' | grep -v -x -- '--simulate' | sort -u
    fi
}

_migkit() {
    local cur prev bin=${COMP_WORDS[0]}
    cur=${COMP_WORDS[COMP_CWORD]}
    prev=${COMP_WORDS[COMP_CWORD - 1]}
    COMPREPLY=()
    # The command (and a sub-command: service select, scheduler node) and -f's value.
    local i w cmd= sub= file= args=()
    for ((i = 1; i < COMP_CWORD; i++)); do
        w=${COMP_WORDS[i]}
        case $w in
            --simulate | --debug-areas) ((i++)); continue ;;
            -f | --config-file) file=${COMP_WORDS[i + 1]}; ((i++)); continue ;;
            --config-file=*) file=${w#*=}; continue ;;
            -*) continue ;;
        esac
        if [[ -z $cmd ]]; then cmd=$w; elif [[ -z $sub ]]; then sub=$w; fi
        args+=("$w")
    done
    case $prev in
        --simulate)
            mapfile -t COMPREPLY < <(compgen -W "$(_migkit_machines "$bin")" -- "$cur"); return ;;
        -c | --selected-config)
            if [[ $cmd != scheduler ]]; then
                mapfile -t COMPREPLY < <(compgen -W "$(_migkit_config_names "${file:-/etc/migkit/config.yaml}")" -- "$cur")
                return
            fi ;;
        -o | --output | --output-format)
            local v
            v=$("$bin" "${args[@]}" -o '?' 2>&1 >/dev/null | sed -n 's/.* accepts \(.*\); docs.*/\1/p' | sed 's/,\| or / /g')
            mapfile -t COMPREPLY < <(compgen -W "$v" -- "$cur"); return ;;
        -f | --config-file | -k | --hooks-file | --kubeconfig | --state | --output-file | --machine-type-file)
            mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return ;;
    esac
    if [[ $cmd == service && $sub == select && ${#args[@]} -eq 2 && $cur != -* ]]; then
        mapfile -t COMPREPLY < <(compgen -W "$(_migkit_config_names "${file:-/etc/migkit/config.yaml}")" -- "$cur")
        return
    fi
    if [[ -z $cmd ]]; then
        if [[ $cur == -* ]]; then
            mapfile -t COMPREPLY < <(compgen -W "$("$bin" --help 2>/dev/null | grep -o -- '--\?-[a-zA-Z][a-z-]*' | sort -u)" -- "$cur")
        else
            mapfile -t COMPREPLY < <(compgen -W "$("$bin" --help 2>/dev/null | _migkit_help_commands)" -- "$cur")
        fi
        return
    fi
    local help
    help=$("$bin" "${args[@]:0:2}" --help 2>/dev/null || "$bin" "$cmd" --help 2>/dev/null)
    if [[ $cur == -* ]]; then
        mapfile -t COMPREPLY < <(compgen -W "$(printf '%s\n' "$help" | grep -o -- '--\?-[a-zA-Z][a-z-]*' | sort -u)" -- "$cur")
    elif [[ -z $sub ]]; then
        local subs
        subs=$(printf '%s\n' "$help" | _migkit_help_commands)
        mapfile -t COMPREPLY < <(compgen -W "$subs" -- "$cur")
    fi
}
complete -F _migkit -o default migkit
