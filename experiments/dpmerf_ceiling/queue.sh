#!/usr/bin/env bash
# Runs the probes listed in $1 (default experiments/dpmerf_ceiling/probes.txt; one "NAME overrides..." a line, # for
# comments), one at a time, in order, skipping names already started (a log outputs/dpmerf_ceiling/NAME.log exists);
# re-reads the list after each probe, so lines can be appended while it runs.
cd "$(dirname "$0")/../.." && mkdir -p outputs/dpmerf_ceiling
q=${1:-experiments/dpmerf_ceiling/probes.txt}
while true; do
  line=$(while read -r name rest; do [ -n "$name" ] && [ "${name:0:1}" != "#" ] && [ ! -e "outputs/dpmerf_ceiling/$name.log" ] && { echo "$name $rest"; break; }; done < "$q")
  [ -z "$line" ] && break
  name=${line%% *}; rest=${line#"$name"}
  echo "$(date +%T) start $name" >> outputs/dpmerf_ceiling/queue.log
  eval "experiments/dpmerf_ceiling/probe.sh $name $rest" > "outputs/dpmerf_ceiling/$name.log" 2>&1
  echo "$(date +%T) end $name rc=$?" >> outputs/dpmerf_ceiling/queue.log
done
