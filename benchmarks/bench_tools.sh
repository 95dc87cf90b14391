#!/bin/bash
# hlo isolate, extract and shrink on the benchmarks' transformer step, each against one `hlo run` of it.
#
#   python benchmarks/gen_transformer.py --out DIR --only transformer
#   benchmarks/bench_tools.sh DIR
#
# Plants two faults in copies of DIR/transformer.hlo (the lines are those of the default 24-layer step):
#   planted.hlo   line 8293: mul.4626 multiply -> subtract (isolate with --reference-module must name it alone)
#   nanplant.hlo  line 6596: exp.34 exponential -> log     (a real NaN: shrink --nan must end at it)
# Prints each command's wall seconds (/usr/bin/time) and the tools' own summaries.
set -u
DIR=${1:?usage: bench_tools.sh DIR (made by gen_transformer.py --only transformer)}
cd "$DIR" || exit 2
grep -q "mul.4626 = f32\[2,32,4,8\]{3,2,1,0} multiply(slice.130, mul.4625)" transformer.hlo || { echo "not the default step"; exit 2; }
sed '8293s/multiply(slice.130, mul.4625)/subtract(slice.130, mul.4625)/' transformer.hlo > planted.hlo
sed '6596s/exponential(sub.627)/log(sub.627)/' transformer.hlo > nanplant.hlo
T="/usr/bin/time -f %e"
echo "== hlo run";     $T hlo run transformer.hlo --inputs transformer.inputs.npz --no-progress > /dev/null
echo "== hlo extract"; $T hlo extract transformer.hlo --inputs transformer.inputs.npz --instruction mul.4626 --height 3 \
                           -o ex.hlo --force | head -1
echo "== hlo shrink";  $T hlo shrink nanplant.hlo --inputs transformer.inputs.npz --nan -o shr.hlo --force | head -1
echo "== hlo isolate"; $T hlo isolate planted.hlo --inputs transformer.inputs.npz --reference-module transformer.hlo | tail -4
