# One line chart of the experiment scripts (common.sh's plot): a series per block of
# datafile (a quoted title line, then "x y std" rows; blocks separated by two blank lines),
# drawn with error bars of one standard deviation.
# Variables (gnuplot -e): datafile, outfile, term (pngcairo | svg), plottitle, xlab, ylab,
# logx (1: a log2 x axis), xticks (the x values to label, comma-separated).
if (term eq 'pngcairo') {
	set terminal pngcairo size 800,520 enhanced font 'sans,11'
} else {
	set terminal svg size 800,520 enhanced font 'sans,11' background '#ffffff'
}
set output outfile
set title plottitle
set xlabel xlab
set ylabel ylab
set key outside right top box
set grid lw 0.5 lc rgb '#cccccc'
set style line 1 lc rgb '#1f77b4' lw 2 pt 7 ps 1.1
set style line 2 lc rgb '#d62728' lw 2 pt 5 ps 1.1
set style line 3 lc rgb '#2ca02c' lw 2 pt 9 ps 1.3
set style line 4 lc rgb '#9467bd' lw 2 pt 11 ps 1.3
set style line 5 lc rgb '#ff7f0e' lw 2 pt 13 ps 1.3
set style line 6 lc rgb '#8c564b' lw 2 pt 15 ps 1.3
stats datafile using 1 nooutput
xmin = STATS_min
xmax = STATS_max
if (logx) {
	set logscale x 2
	set xrange [xmin / 1.25 : xmax * 1.25]
} else {
	pad = xmax > xmin ? 0.05 * (xmax - xmin) : 0.5
	set xrange [xmin - pad : xmax + pad]
}
eval sprintf('set xtics (%s)', xticks)
# y from the error bars' extent with a margin, never below 0 (every metric here is >= 0)
stats datafile using ($2 - $3) nooutput
ylo = STATS_min
stats datafile using ($2 + $3) nooutput
yhi = STATS_max
ypad = yhi > ylo ? 0.08 * (yhi - ylo) : (yhi > 0 ? 0.1 * yhi : 1)
set yrange [(ylo - ypad > 0 ? ylo - ypad : 0) : yhi + ypad]
plot for [i=0:STATS_blocks-1] datafile index i using 1:2:3 with yerrorlines ls (i % 6 + 1) \
	title columnheader(1)
