/* Bar charts of observed against expected counts as one self-contained SVG
 * file (no scripts, no external fonts), for psr verify --plot. */
#ifndef PSR_CLI_SVG_H
#define PSR_CLI_SVG_H

#include <stdbool.h>
#include <stddef.h>

/* One category: a bar for the observed count, a tick at the expected one
 * and the band [low, high] the test allows. */
typedef struct svg_bar {
    const char *label; /* under the bar; NULL: its index */
    const char *note;  /* a second line under the label, or NULL */
    double observed, expected, low, high;
} svg_bar;

/* One chart: its heading (the test, its numbers and verdict) over the bars. */
typedef struct svg_panel {
    const char *heading;
    bool pass; /* colours the heading */
    const char *x_label, *y_label;
    const svg_bar *bars;
    size_t n;
} svg_panel;

/* What the band means, for the legend ("allowed: two-sided p >= 1e-06 per
 * token"). */
typedef struct svg_chart {
    const char *title;
    const char *subtitle; /* lines split at '\n' */
    const char *band_meaning;
    const svg_panel *panels;
    size_t count;
} svg_chart;

/* Writes the chart to path, the panels stacked; 0, or -1 with errno set
 * when opening, a write or closing failed. */
int svg_write(const char *path, const svg_chart *chart);

#endif
