cd gpuwork/probe && ./probe 10 > $OUT/probe.txt  # bench/gemm_algos.cu built as gpuwork/probe/probe
