/* Bar charts as SVG written with fprintf: every write is checked, and the
 * file is only reported written when it was closed without an error. */
#include "svg.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

enum {
    WIDTH = 900,
    LEFT = 84,       /* room for the y axis's numbers and label */
    RIGHT = 24,
    LINE = 18,       /* between the subtitle's lines */
    PANEL = 310,     /* a panel's height: heading, plot, labels */
    PLOT_TOP = 34,   /* the plot's top, from the panel's */
    PLOT_HEIGHT = 200,
    MAX_LABELS = 40, /* more bars than this: every few get a label */
};

static const char *const FONT = "DejaVu Sans, Helvetica, Arial, sans-serif";
static const char *const BAR_IN = "#2f6fb3", *const BAR_OUT = "#c62828", *const BAND = "#b7dfb9";

typedef struct svg_out {
    FILE *f;
    bool ok; /* false from the first failed write on */
} svg_out;

static void put(svg_out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void put(svg_out *o, const char *fmt, ...)
{
    if (!o->ok)
        return;
    va_list ap;
    va_start(ap, fmt);
    if (vfprintf(o->f, fmt, ap) < 0)
        o->ok = false;
    va_end(ap);
}

/* Text content or an attribute value, escaped for XML. */
static void put_text(svg_out *o, const char *s)
{
    for (; s && *s && o->ok; s++) {
        const char *e = *s == '&' ? "&amp;" : *s == '<' ? "&lt;" : *s == '>' ? "&gt;" : *s == '"' ? "&quot;" : NULL;
        if (e ? fputs(e, o->f) < 0 : fputc(*s, o->f) == EOF)
            o->ok = false;
    }
}

/* <text> at (x, y) with the given attributes around escaped content. */
static void put_label(svg_out *o, double x, double y, const char *attrs, const char *text)
{
    put(o, "<text x=\"%.1f\" y=\"%.1f\" %s>", x, y, attrs);
    put_text(o, text);
    put(o, "</text>\n");
}

static double finite_or_zero(double v)
{
    return isfinite(v) ? v : 0.0;
}

/* A round step (1, 2 or 5 times a power of ten) giving about five ticks. */
static double tick_step(double top)
{
    double raw = top / 5.0, unit = pow(10.0, floor(log10(raw)));
    double m = raw / unit;
    return unit * (m <= 1.0 ? 1.0 : m <= 2.0 ? 2.0 : m <= 5.0 ? 5.0 : 10.0);
}

static double panel_top_value(const svg_panel *p)
{
    double top = 0;
    for (size_t i = 0; i < p->n; i++) {
        const svg_bar *b = &p->bars[i];
        top = fmax(top, fmax(fmax(finite_or_zero(b->observed), finite_or_zero(b->expected)),
                             finite_or_zero(b->high)));
    }
    return top > 0 ? top * 1.08 : 1.0;
}

/* The y axis: grid lines, their numbers and the axis's name. */
static void put_y_axis(svg_out *o, const svg_panel *p, double y0, double top, double step)
{
    double plot_w = WIDTH - LEFT - RIGHT;
    for (double v = 0; v <= top * (1 + 1e-9); v += step) {
        double y = y0 + PLOT_HEIGHT - v / top * PLOT_HEIGHT;
        char num[32];
        snprintf(num, sizeof num, step >= 1 ? "%.0f" : "%g", v);
        put(o, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e3e3e3\"/>\n", LEFT, y, LEFT + plot_w, y);
        put_label(o, LEFT - 6, y + 4, "text-anchor=\"end\" font-size=\"11\"", num);
    }
    put(o, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#444\"/>\n", LEFT, y0, LEFT,
        y0 + PLOT_HEIGHT);
    put(o, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#444\"/>\n", LEFT, y0 + PLOT_HEIGHT,
        LEFT + plot_w, y0 + PLOT_HEIGHT);
    double yc = y0 + PLOT_HEIGHT / 2.0;
    char attrs[96];
    snprintf(attrs, sizeof attrs, "text-anchor=\"middle\" font-size=\"12\" transform=\"rotate(-90 %d %.1f)\"", 22,
             yc);
    put_label(o, 22, yc, attrs, p->y_label);
}

/* One category: the band, the observed bar, the expected tick, labels. */
static void put_bar(svg_out *o, const svg_bar *b, size_t i, double slot, double y0, double top, bool labelled)
{
    double x = LEFT + slot * (double)i, base = y0 + PLOT_HEIGHT, scale = PLOT_HEIGHT / top;
    double obs = finite_or_zero(b->observed), exp_ = finite_or_zero(b->expected);
    double lo = finite_or_zero(b->low), hi = finite_or_zero(b->high);
    bool inside = obs >= lo && obs <= hi;
    /* A count outside its band stays visible even at zero. */
    double height = fmax(obs * scale, inside ? 0.0 : 3.0);
    put(o, "<rect class=\"band\" x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"%s\"/>\n",
        x + slot * 0.08, base - hi * scale, slot * 0.84, fmax((hi - lo) * scale, 1.0), BAND);
    put(o, "<rect class=\"bar\" x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"%s\" "
           "data-observed=\"%.17g\" data-expected=\"%.17g\" data-low=\"%.17g\" data-high=\"%.17g\">",
        x + slot * 0.25, base - height, slot * 0.5, height, inside ? BAR_IN : BAR_OUT, obs, exp_, lo, hi);
    put(o, "<title>");
    if (b->label)
        put_text(o, b->label);
    else
        put(o, "token %zu", i);
    put(o, ": observed %.17g, expected %.6g, allowed %.17g to %.17g</title></rect>\n", obs, exp_, lo, hi);
    put(o, "<line class=\"expected\" x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"#111\" "
           "stroke-width=\"2\"/>\n",
        x + slot * 0.08, base - exp_ * scale, x + slot * 0.92, base - exp_ * scale);
    if (!labelled)
        return;
    char num[32];
    snprintf(num, sizeof num, "%zu", i);
    put_label(o, x + slot / 2, base + 15, "text-anchor=\"middle\" font-size=\"11\"", b->label ? b->label : num);
    if (b->note)
        put_label(o, x + slot / 2, base + 29, "text-anchor=\"middle\" font-size=\"11\" fill=\"#555\"", b->note);
}

static void put_panel(svg_out *o, const svg_panel *p, double y)
{
    put(o, "<g class=\"panel\">\n");
    put_label(o, LEFT, y + 18, p->pass ? "class=\"heading\" font-size=\"13\" font-weight=\"bold\" fill=\"#1b5e20\""
                                       : "class=\"heading\" font-size=\"13\" font-weight=\"bold\" fill=\"#b71c1c\"",
              p->heading);
    double top = panel_top_value(p), step = tick_step(top), y0 = y + PLOT_TOP;
    top = ceil(top / step) * step;
    put_y_axis(o, p, y0, top, step);
    double slot = (double)(WIDTH - LEFT - RIGHT) / (double)(p->n ? p->n : 1);
    size_t every = p->n > MAX_LABELS ? (p->n + MAX_LABELS - 1) / MAX_LABELS : 1;
    for (size_t i = 0; i < p->n; i++)
        put_bar(o, &p->bars[i], i, slot, y0, top, i % every == 0);
    put_label(o, LEFT + (WIDTH - LEFT - RIGHT) / 2.0, y0 + PLOT_HEIGHT + 48,
              "text-anchor=\"middle\" font-size=\"12\"", p->x_label);
    put(o, "</g>\n");
}

/* The key to the marks, once under the title. */
static void put_legend(svg_out *o, const char *band_meaning, double y)
{
    put(o, "<g class=\"legend\" font-size=\"12\">\n");
    put(o, "<rect x=\"%d\" y=\"%.1f\" width=\"12\" height=\"12\" fill=\"%s\"/>\n", LEFT, y - 10, BAR_IN);
    put(o, "<rect x=\"%d\" y=\"%.1f\" width=\"12\" height=\"12\" fill=\"%s\"/>\n", LEFT + 14, y - 10, BAR_OUT);
    put_label(o, LEFT + 32, y, "", "observed (red: outside its band)");
    put(o, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#111\" stroke-width=\"2\"/>\n", LEFT + 250,
        y - 4, LEFT + 270, y - 4);
    put_label(o, LEFT + 276, y, "", "expected");
    put(o, "<rect x=\"%d\" y=\"%.1f\" width=\"20\" height=\"12\" fill=\"%s\"/>\n", LEFT + 350, y - 10, BAND);
    put_label(o, LEFT + 376, y, "", band_meaning);
    put(o, "</g>\n");
}

/* The subtitle, a <text> per line; returns the lines. */
static int put_subtitle(svg_out *o, const char *subtitle)
{
    int lines = 0;
    for (const char *s = subtitle; s && *s; lines++) {
        const char *end = strchr(s, '\n');
        size_t len = end ? (size_t)(end - s) : strlen(s);
        char line[512];
        snprintf(line, sizeof line, "%.*s", (int)(len < sizeof line ? len : sizeof line - 1), s);
        put_label(o, LEFT, 48 + LINE * lines, "class=\"subtitle\" font-size=\"13\" fill=\"#444\"", line);
        s += len + (end != NULL);
    }
    return lines;
}

static int count_lines(const char *s)
{
    int lines = s && *s ? 1 : 0;
    for (; s && *s; s++)
        lines += *s == '\n' && s[1];
    return lines;
}

static void put_chart(svg_out *o, const svg_chart *c)
{
    double legend = 48 + LINE * count_lines(c->subtitle) + 6, top = legend + 28;
    int height = (int)top + PANEL * (int)c->count + 10;
    put(o, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    put(o, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
           "font-family=\"%s\">\n",
        WIDTH, height, WIDTH, height, FONT);
    put(o, "<title>");
    put_text(o, c->title);
    put(o, "</title>\n<rect width=\"100%%\" height=\"100%%\" fill=\"#fff\"/>\n");
    put_label(o, LEFT, 28, "class=\"title\" font-size=\"18\" font-weight=\"bold\"", c->title);
    put_subtitle(o, c->subtitle);
    put_legend(o, c->band_meaning, legend);
    for (size_t i = 0; i < c->count; i++)
        put_panel(o, &c->panels[i], top + PANEL * (double)i);
    put(o, "</svg>\n");
}

int svg_write(const char *path, const svg_chart *chart)
{
    svg_out o = {fopen(path, "w"), true};
    if (!o.f)
        return -1;
    put_chart(&o, chart);
    int saved = o.ok ? 0 : errno;
    if (fclose(o.f) != 0 && o.ok) {
        saved = errno;
        o.ok = false;
    }
    if (o.ok)
        return 0;
    errno = saved ? saved : EIO;
    return -1;
}
