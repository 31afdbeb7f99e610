# Time and memory per sequence against n from a bench/linformer_table CSV
# (impl,model,n,k,batch,seconds_per_seq,peak_bytes,status), log-log, one line for the
# Transformer and one per Linformer k, at batch 1 or at the budget's batch.
#
#   gnuplot -e "csv='table.csv'; out='table.png'; batch='1'" scripts/bench/plot.gp
#   gnuplot -e "csv='table.csv'; out='table-max.png'; batch='max'" scripts/bench/plot.gp
#
# batch '1' takes the rows with batch 1; 'max' the other rows (the budget's batch). Only rows
# with status ok are drawn; memory per sequence is peak_bytes / batch.

if (!exists("csv")) csv = 'linformer_table.csv'
if (!exists("out")) out = 'linformer_table.png'
if (!exists("batch")) batch = '1'

set terminal pngcairo size 1200,480 noenhanced
set output out
set datafile separator ','
set logscale xy 2
set key top left
set grid
set xlabel 'n (tokens)'

# The rows of one series as "n,value" lines: model m, k (empty for the Transformer),
# column col (6 = seconds per sequence, 7 = peak bytes) divided by the batch when per_seq.
rows(m, k, col, per_seq) = sprintf("< awk -F, 'NR > 1 && $8 == \"ok\" && $2 == \"%s\" && $4 == \"%s\" && %s { print $3 \",\" $%d / (%d ? $5 : 1) }' %s", m, k, batch eq '1' ? '$5 == 1' : '$5 != 1', col, per_seq, csv)

ks = system(sprintf("awk -F, 'NR > 1 && $2 == \"linformer\" { print $4 }' %s | sort -n | uniq | tr '\\n' ' '", csv))

set multiplot layout 1,2 title sprintf('cformer encoder forward, no grad, batch %s', batch)
set ylabel 'seconds per sequence'
plot rows('transformer', '', 6, 0) using 1:2 with linespoints title 'Transformer', \
     for [k in ks] rows('linformer', k, 6, 0) using 1:2 with linespoints title sprintf('Linformer k=%s', k)
set ylabel 'peak MiB per sequence'
plot rows('transformer', '', 7, 1) using 1:($2 / 1048576) with linespoints title 'Transformer', \
     for [k in ks] rows('linformer', k, 7, 1) using 1:($2 / 1048576) with linespoints title sprintf('Linformer k=%s', k)
unset multiplot
