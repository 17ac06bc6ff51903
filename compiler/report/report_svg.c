/* report_svg.c — live memory over the schedule (one micro-batch's program, then the tail), stacked,
 * the peak marked, CUDA-graph scopes and replays shaded, phases and layers marked. Two panels on one
 * program-point axis: everything, then the transient memory alone on its own scale, so activations
 * are not squashed under the persistent parameters, gradients and optimizer state.
 *
 * What is drawn: a layout of one GPU, the single-rank plan by role (memplan.c, exact); a sharded
 * layout, by default the worst of the ranks `stepc plan` reports (memrank.c: its weights, grads and
 * optimizer state, its stage's one-micro-batch transient curve, the other micro-batches in flight
 * over the micro program and the optimizer step's grad copies over the optimizer), so the drawn
 * peak is that rank's max allocated; report_svg_rank picks another.
 *
 * Each panel's unit is MB below 1 GB, GB otherwise. Labels are placed against the boxes of the
 * labels already placed (a width per character that errs wide): a label that fits nowhere is
 * left out, never drawn over another. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "report/report.h"

enum { W = 1200, H = 800, X0 = 70, Y0 = 30, PW = 860, PH = 380, Y1 = 480, PH1 = 260, FONT = 11, MAXB = 10 };

/* One stacked band: its legend name and colour. */
typedef struct {
  const char *name, *color;
} Band;

/* What the panels draw: nb bands over npos program points, bands k_transient.. the transient panel's. */
typedef struct {
  Band b[MAXB];
  int nb, k_transient, npos;
  double *v;   /* npos x nb bytes */
  double peak; /* the first panel's peak (bytes) and where */
  int peak_pos;
  char peak_note[96]; /* after "peak N GB" */
  char what[96];      /* the heading's "(single rank)" */
} Series;

/* ---- labels placed without collisions ---- */

typedef struct {
  double x0, y0, x1, y1;
} Box;
typedef struct {
  Box *b;
  int n, cap;
} Boxes;

/* The box a text takes: FONT-sized characters at most 0.62 em wide, plus a pixel of margin. */
static Box text_box(double x, double y, const char *anchor, const char *s, int size) {
  size_t chars = 0;
  for (const char *c = s; *c; c += text_utf8_len(c) ? text_utf8_len(c) : 1)
    chars++;
  double w = (double)chars * 0.62 * size + 2;
  double x0 = strcmp(anchor, "end") == 0 ? x - w : strcmp(anchor, "middle") == 0 ? x - w / 2 : x;
  return (Box){x0 - 1, y - 0.8 * size - 1, x0 + w + 1, y + 0.25 * size + 1};
}

static bool box_free(const Boxes *bs, Box a) {
  for (int i = 0; i < bs->n; i++) {
    const Box *b = &bs->b[i];
    if (a.x0 < b->x1 && b->x0 < a.x1 && a.y0 < b->y1 && b->y0 < a.y1) return false;
  }
  return true;
}

/* Claims a's place; -1 out of memory. */
static int box_add(Boxes *bs, Box a) {
  if (bs->n == bs->cap) {
    int cap = bs->cap ? 2 * bs->cap : 256;
    Box *nb = realloc(bs->b, (size_t)cap * sizeof *nb);
    if (!nb) return -1;
    bs->b = nb, bs->cap = cap;
  }
  bs->b[bs->n++] = a;
  return 0;
}

/* Text inside an SVG element: markup escaped; bytes that are not UTF-8 and control characters (an
 * XML parser rejects the file for either) written as U+FFFD. */
static void xml_write_text(FILE *f, const char *s) {
  for (const char *c = s; *c;) {
    size_t n = text_utf8_len(c);
    unsigned char b = (unsigned char)*c;
    if (b == '&')
      fputs("&amp;", f);
    else if (b == '<')
      fputs("&lt;", f);
    else if (b == '>')
      fputs("&gt;", f);
    else if (b == '"')
      fputs("&quot;", f);
    else if (n == 0 || (b < 0x20 && b != '\t'))
      fputs("\xef\xbf\xbd", f);
    else
      fwrite(c, 1, n, f);
    c += n ? n : 1;
  }
}

/* A label at (x, y) when its box is free (0: drawn, 1: no room, -1: out of memory). */
static int label_attr(FILE *f, Boxes *bs, double x, double y, const char *anchor, const char *cls,
                      const char *fill, const char *attr, const char *s) {
  Box a = text_box(x, y, anchor, s, FONT);
  if (!box_free(bs, a)) return 1;
  if (box_add(bs, a) != 0) return -1;
  fprintf(f, "<text class=\"%s\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\" fill=\"%s\"%s>", cls, x, y, anchor,
          fill, attr);
  xml_write_text(f, s);
  fputs("</text>\n", f);
  return 0;
}

static int label(FILE *f, Boxes *bs, double x, double y, const char *anchor, const char *cls,
                 const char *fill, const char *s) {
  return label_attr(f, bs, x, y, anchor, cls, fill, "", s);
}

/* ---- the panels ---- */

/* A round tick step (1, 2 or 5 times a power of ten) that gives three to five ticks up to ymax. */
static double tick_step(double ymax) {
  double raw = ymax / 4, p = pow(10, floor(log10(raw))), m = raw / p;
  return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * p;
}

/* The unit of a panel whose values go up to most bytes: MB below 1 GB, GB otherwise. */
static double unit_of(double most, const char **name) {
  *name = most < 1e9 ? "MB" : "GB";
  return most < 1e9 ? 1e6 : 1e9;
}

/* Where each phase of the step begins, as a dashed line and its name (on the first free row): the
 * picture reads forward, backward (with its replays), gradient reduction, optimizer. */
static int phase_marks(const Plan *p, FILE *f, Boxes *bs, double dx, int y0, int ph_h) {
  static const char *const NAME[IR_PHASE_COUNT] = {[IR_PHASE_FORWARD] = "forward",
                                                   [IR_PHASE_BACKWARD] = "backward",
                                                   [IR_PHASE_REPLAY] = "backward",
                                                   [IR_PHASE_REDUCE] = "reduce",
                                                   [IR_PHASE_OPTIMIZER] = "optimizer"};
  bool seen[IR_PHASE_COUNT] = {false};
  for (int i = 0, q = 0; i < p->sc.n; i++) {
    if (p->sc.it[i].kind != SCHED_OP) continue;
    Phase ph = p->g->op[p->sc.it[i].id].tags.phase;
    if (ph == IR_PHASE_REPLAY) ph = IR_PHASE_BACKWARD; /* replays run inside the backward pass */
    if (ph < IR_PHASE_COUNT && !seen[ph]) {
      seen[ph] = true;
      double x = X0 + dx * q;
      fprintf(f,
              "<line class=\"phase\" x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#444\" "
              "stroke-dasharray=\"2,3\"/>\n",
              x, y0, x, y0 + ph_h);
      for (int row = 0, rc = 1; row < 4 && rc == 1; row++)
        if ((rc = label(f, bs, x + 3, y0 + 11 + 12 * row, "start", "phase", "#444", NAME[ph])) < 0) return -1;
    }
    q++;
  }
  return 0;
}

/* The first program point of each layer's run of ops (forward, backward, replays) as a tick under
 * the axis, named Ln where its label has room. */
static int layer_marks(const Plan *p, FILE *f, Boxes *bs, double dx, int y_axis) {
  int prev = -1;
  for (int i = 0, q = 0; i < p->sc.n; i++) {
    if (p->sc.it[i].kind != SCHED_OP) continue;
    int l = p->g->op[p->sc.it[i].id].tags.layer;
    if (l >= 0 && l != prev) {
      double x = X0 + dx * q;
      fprintf(f,
              "<line class=\"layer\" data-layer=\"%d\" x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" "
              "stroke=\"#666\"/>\n",
              l, x, y_axis, x, y_axis + 4);
      char nm[16];
      snprintf(nm, sizeof nm, "L%d", l);
      if (label(f, bs, x, y_axis + 14, "middle", "layer", "#666", nm) < 0) return -1;
    }
    prev = l;
    q++;
  }
  return 0;
}

/* The sum of bands k0..k at program point i. */
static double stacked(const Series *s, int i, int k0, int k) {
  double cum = 0;
  for (int j = k0; j <= k; j++)
    cum += s->v[(size_t)i * s->nb + j];
  return cum;
}

/* One panel: bands k0.. stacked at y0 with height ph_h on their own round-ticked scale in their
 * own unit, scopes and replays shaded, phases and layers marked, the panel's maximum dashed in red
 * and labelled where it has room. */
static int panel(const Plan *p, const Series *s, FILE *f, Boxes *bs, const char *id, int k0, int y0,
                 int ph_h) {
  int n = s->npos, top = 0;
  double dx = n > 1 ? (double)PW / (n - 1) : PW, most = 0;
  for (int i = 0; i < n; i++) {
    double v = stacked(s, i, k0, s->nb - 1);
    if (v > most) most = v, top = i;
  }
  if (k0 == 0 && s->peak > 0) most = s->peak, top = s->peak_pos;
  const char *un;
  double unit = unit_of(most, &un), ymax = (most > 0 ? most : 1) * 1.08;
  fprintf(f, "<g class=\"panel\" id=\"%s\" data-unit=\"%s\">\n", id, un);
  int *pt = malloc((size_t)(p->sc.n + 1) * sizeof *pt), q = 0;
  if (!pt) return -1;
  for (int i = 0; i < p->sc.n; i++)
    pt[i] = p->sc.it[i].kind == SCHED_OP ? q++ : q;
  for (int i = 0; i < p->sr.n; i++) {
    const ScopeInst *sc = &p->sr.s[i];
    double a = X0 + dx * pt[sc->first], b = X0 + dx * (pt[sc->last] + 1);
    fprintf(f, "<rect x=\"%.1f\" y=\"%d\" width=\"%.1f\" height=\"%d\" fill=\"#9ecae1\" opacity=\"0.25\"/>\n",
            a, y0, b - a, ph_h);
  }
  for (int i = 0; i < p->sc.n; i++)
    if (p->sc.it[i].kind == SCHED_OP && p->g->op[p->sc.it[i].id].tags.phase == IR_PHASE_REPLAY)
      fprintf(f,
              "<rect x=\"%.1f\" y=\"%d\" width=\"%.1f\" height=\"%d\" fill=\"#fdae6b\" opacity=\"0.45\"/>\n",
              X0 + dx * pt[i], y0, dx > 1 ? dx : 1, ph_h);
  free(pt);
  for (int k = s->nb - 1; k >= k0; k--) { /* stacked areas, bottom up */
    fprintf(f, "<polygon fill=\"%s\" points=\"", s->b[k].color);
    for (int i = 0; i < n; i++)
      fprintf(f, "%.1f,%.1f ", X0 + dx * i, y0 + ph_h - ph_h * stacked(s, i, k0, k) / ymax);
    fprintf(f, "%.1f,%d %d,%d\"/>\n", X0 + dx * (n - 1), y0 + ph_h, X0, y0 + ph_h);
  }
  fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"black\"/>\n", X0, y0 + ph_h, X0 + PW,
          y0 + ph_h);
  fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"black\"/>\n", X0, y0, X0, y0 + ph_h);
  double step = tick_step(ymax / unit);
  int decimals = step >= 1 ? 0 : (int)ceil(-log10(step) - 1e-9);
  for (int t = 0; t * step <= ymax / unit; t++) {
    double v = t * step, y = y0 + ph_h - ph_h * v * unit / ymax;
    char txt[48];
    snprintf(txt, sizeof txt, "%.*f", decimals, v);
    fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"black\"/>", X0 - 3, y, X0, y);
    if (label(f, bs, X0 - 5, y + 4, "end", "tick", "black", txt) < 0) return -1;
  }
  for (int dy = 6, rc = 1; dy <= 22 && rc == 1; dy += 4) /* above the axis, clear of its top tick */
    if ((rc = label(f, bs, X0 - 5, y0 - dy, "end", "unit", "black", un)) < 0) return -1;
  if (phase_marks(p, f, bs, dx, y0, ph_h) != 0 || layer_marks(p, f, bs, dx, y0 + ph_h) != 0) return -1;
  double px = X0 + dx * top, py = y0 + ph_h - ph_h * most / ymax;
  fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"red\" stroke-dasharray=\"4,3\"/>\n",
          px, y0, px, y0 + ph_h);
  char txt[200], bytes[48];
  snprintf(bytes, sizeof bytes, " data-bytes=\"%.0f\"", most);
  if (k0 == 0)
    snprintf(txt, sizeof txt, "peak %.*f %s %s", un[0] == 'G' ? 3 : 2, most / unit, un, s->peak_note);
  else
    snprintf(txt, sizeof txt, "most %.*f %s transient", un[0] == 'G' ? 3 : 2, most / unit, un);
  /* beside the line at the peak, right then left, from just above the peak down the panel (and
   * above it); the first place whose box is free and inside the panel */
  int placed = 1;
  for (int r = 0; r < 2 * (ph_h / 12) && placed == 1; r++) {
    double y = py - 4 + (r % 2 ? -1 : 1) * 12.0 * ((r + 1) / 2);
    if (y < y0 + 10 || y > y0 + ph_h - 4) continue;
    for (int side = 0; side < 2 && placed == 1; side++) {
      double x = side ? px - 4 : px + 4;
      Box a = text_box(x, y, side ? "end" : "start", txt, FONT);
      if (a.x0 < X0 || a.x1 > X0 + PW) continue;
      if ((placed = label_attr(f, bs, x, y, side ? "end" : "start", "peak", "red", bytes, txt)) < 0)
        return -1;
    }
  }
  if (placed == 1 && label_attr(f, bs, X0 + PW, y0 - 6, "end", "peak", "red", bytes, txt) < 0)
    return -1; /* over the panel */
  fprintf(f, "</g>\n");
  return 0;
}

/* ---- what is drawn ---- */

/* The single-rank plan by role (memplan.c). */
static int series_single(const Plan *p, Series *s) {
  static const struct {
    int role;
    const char *color;
  } STACK[] = {{ROLE_PARAM, "#4c72b0"},     {ROLE_MASTER, "#6d8fc9"},
               {ROLE_GRAD, "#55a868"},      {ROLE_OPTIM, "#8172b2"},
               {MEM_ROLE_GRAPH, "#937860"}, {ROLE_INPUT, "#8c8c8c"},
               {ROLE_ACT, "#dd8452"},       {ROLE_ACT_GRAD, "#c44e52"},
               {ROLE_WORKSPACE, "#da8bc3"}, {MEM_ROLE_ZERO_STAGING, "#bcbd22"}};
  enum { NSTACK = sizeof STACK / sizeof STACK[0] };
  _Static_assert((int)NSTACK <= (int)MAXB, "bands");
  const MemPlan *mp = &p->mp;
  /* the distributed optimizer's staging (the last band) only where the plan has one */
  int nb = mp->zstage_bytes > 0 ? NSTACK : NSTACK - 1;
  s->nb = nb, s->k_transient = 5 /* ROLE_INPUT */, s->npos = mp->npos;
  if (!(s->v = malloc((size_t)(mp->npos + 1) * (size_t)nb * sizeof *s->v))) return -1;
  for (int k = 0; k < nb; k++)
    s->b[k] = (Band){memplan_role_name(STACK[k].role), STACK[k].color};
  for (int i = 0; i < mp->npos; i++)
    for (int k = 0; k < nb; k++)
      s->v[(size_t)i * nb + k] = (double)mp->live_role[(size_t)i * MEM_NROLES + STACK[k].role];
  s->peak = (double)mp->peak, s->peak_pos = mp->peak_pos;
  const char *un;
  double arena = (double)(mp->arena + mp->region), u = unit_of(arena, &un);
  snprintf(s->peak_note, sizeof s->peak_note, "(arena %.*f %s)", un[0] == 'G' ? 3 : 2, arena / u, un);
  snprintf(s->what, sizeof s->what, "single rank");
  return 0;
}

/* Rank k of the per-rank report (memrank.c): its persistent state as constant bands, its stage's
 * one-micro-batch transient curve, the other micro-batches in flight over the micro program, and
 * over the optimizer's points the optimizer step's grad copies in place of the transient curve (the
 * table's opt step). Its maximum is the rank's max allocated: the larger of the forward/backward
 * peak (state + the curve's peak + in flight) and the optimizer step. */
static int series_rank(const Plan *p, int k, Series *s, char *err, size_t nerr) {
  const MemPlan *mp = &p->mp;
  const Schedule *sc = &p->sc;
  RankReport rr;
  double *curve = malloc((size_t)3 * (mp->npos + 1) * sizeof *curve);
  if (!curve || memrank_curves(p->g, p->fz, &p->spec, sc, &p->sr, mp, &rr, curve, err, nerr) != 0) {
    if (!curve) snprintf(err, nerr, "out of memory");
    free(curve);
    return -1;
  }
  const RankMem *r = &rr.r[k];
  static const Band B[] = {{"weights", "#4c72b0"},          {"main grads", "#55a868"},
                           {"master + moments", "#8172b2"}, {"graph buffers", "#937860"},
                           {"workspace", "#da8bc3"},        {"activations", "#dd8452"},
                           {"in flight", "#c44e52"},        {"opt. grad copies", "#8c8c8c"}};
  enum { NB = sizeof B / sizeof B[0] };
  _Static_assert((int)NB <= (int)MAXB, "bands");
  s->nb = NB, s->k_transient = 5, s->npos = mp->npos;
  memcpy(s->b, B, sizeof B);
  if (!(s->v = malloc((size_t)(mp->npos + 1) * NB * sizeof *s->v))) {
    free(curve);
    snprintf(err, nerr, "out of memory");
    return -1;
  }
  double state = r->weights + r->grads + r->optimizer + r->graph_buffers + r->workspace;
  double copies = r->optimizer_step > state ? r->optimizer_step - state : 0;
  s->peak = 0, s->peak_pos = 0;
  int micro_pts = 0;
  for (int i = 0; i < sc->micro_end; i++)
    micro_pts += sc->it[i].kind == SCHED_OP;
  for (int i = 0, q = 0; i < sc->n; i++) {
    if (sc->it[i].kind != SCHED_OP) continue;
    double *v = &s->v[(size_t)q * NB];
    v[0] = r->weights, v[1] = r->grads, v[2] = r->optimizer, v[3] = r->graph_buffers, v[4] = r->workspace;
    /* the optimizer step holds the state and its grad copies, no transient (the table's opt step) */
    bool opt = p->g->op[sc->it[i].id].tags.phase == IR_PHASE_OPTIMIZER;
    v[5] = opt ? 0 : curve[(size_t)k * mp->npos + q];
    v[6] = q < micro_pts ? (r->inflight - 1) * r->saved_per_micro : 0;
    v[7] = opt ? copies : 0;
    double sum = stacked(s, q, 0, NB - 1);
    if (sum > s->peak) s->peak = sum, s->peak_pos = q;
    q++;
  }
  free(curve);
  snprintf(s->peak_note, sizeof s->peak_note, "(max allocated, %s)", r->name);
  bool worst = true;
  for (int i = 0; i < rr.n; i++)
    worst = worst && rr.r[i].max_allocated <= r->max_allocated;
  snprintf(s->what, sizeof s->what, "%s, %s rank of TP%d PP%d EP%d DP%d", r->name, worst ? "the worst" : "a",
           rr.tp, rr.pp, rr.ep, rr.dp);
  return 0;
}

int report_svg_rank(const Plan *p, const char *which, int *rank, char *err, size_t nerr) {
  const RankReport *rr = &p->rank;
  if (!which || strcmp(which, "worst") == 0) {
    *rank = REPORT_SVG_SINGLE;
    if (p->spec.train.world_size <= 1) return 0; /* one GPU: the exact plan, by role */
    for (int i = 0; i < rr->n; i++)
      if (*rank < 0 || rr->r[i].max_allocated > rr->r[*rank].max_allocated) *rank = i;
    return 0;
  }
  if (strcmp(which, "single") == 0) return *rank = REPORT_SVG_SINGLE, 0;
  char *end;
  long st = strtol(which, &end, 10);
  for (int i = 0; i < rr->n && *which && !*end; i++)
    if (rr->r[i].stage == st) return *rank = i, 0;
  size_t u = (size_t)snprintf(
      err, nerr, "--svg-rank wants worst, single or a pipeline stage the per-rank table shows (");
  for (int i = 0; i < rr->n && u < nerr; i++)
    u += (size_t)snprintf(err + u, nerr - u, "%s%d", i ? ", " : "", rr->r[i].stage);
  if (u < nerr) snprintf(err + u, nerr - u, "), not %s", which);
  return -1;
}

int report_plan_svg(const Plan *p, int rank, FILE *f, char *err, size_t nerr) {
  Series s = {0};
  if (rank >= 0 ? series_rank(p, rank, &s, err, nerr) : series_single(p, &s)) {
    if (rank < 0) snprintf(err, nerr, "out of memory");
    return -1;
  }
  Boxes bs = {0};
  int rc = 0;
  const char *un_all, *un_tr;
  double most_tr = 0;
  for (int i = 0; i < s.npos; i++) {
    double v = stacked(&s, i, s.k_transient, s.nb - 1);
    if (v > most_tr) most_tr = v;
  }
  unit_of(s.peak, &un_all), unit_of(most_tr, &un_tr);
  fprintf(f,
          "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" font-family=\"sans-serif\" "
          "font-size=\"%d\">\n",
          W, H, FONT);
  fprintf(f, "<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n", W, H);
  fprintf(f, "<title>stepc plan: ");
  xml_write_text(f, p->spec.recipe_path);
  fprintf(f, "</title>\n<text class=\"heading\" x=\"%d\" y=\"18\" font-size=\"13\">", X0);
  xml_write_text(f, p->spec.recipe_path);
  fprintf(f, ": live memory over one micro-batch and the step tail; ");
  xml_write_text(f, s.what);
  fprintf(f, " (%s)</text>\n", un_all);
  /* the headings and the caption at 13 px: their boxes claimed at that size */
  char head[200];
  snprintf(head, sizeof head, "transient memory alone (%s), on its own scale (%s)",
           rank >= 0 ? "activations, micro-batches in flight, grad copies"
                     : "inputs, activations, their gradients, workspace",
           un_tr);
  if (box_add(&bs, text_box(X0, Y1 - 12, "start", head, 13)) != 0) rc = -1;
  if (rc == 0) rc = panel(p, &s, f, &bs, "all", 0, Y0, PH);
  if (rc == 0) {
    fprintf(f, "<text class=\"heading\" x=\"%d\" y=\"%d\" font-size=\"13\">%s</text>\n", X0, Y1 - 12, head);
    rc = panel(p, &s, f, &bs, "transient", s.k_transient, Y1, PH1);
  }
  if (rc == 0) {
    fprintf(f,
            "<text class=\"caption\" x=\"%d\" y=\"%d\">program point (op) -&gt;  forward | backward + "
            "replays | tail; Ln: layer n</text>\n",
            X0, Y1 + PH1 + 36);
    int ly = Y0;
    for (int k = 0; k < s.nb; k++, ly += 16) {
      fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"10\" height=\"10\" fill=\"%s\"/>", X0 + PW + 15, ly,
              s.b[k].color);
      fprintf(f, "<text class=\"legend\" x=\"%d\" y=\"%d\">%s</text>\n", X0 + PW + 30, ly + 9, s.b[k].name);
    }
    fprintf(f,
            "<rect x=\"%d\" y=\"%d\" width=\"10\" height=\"10\" fill=\"#9ecae1\" opacity=\"0.5\"/><text "
            "class=\"legend\" x=\"%d\" y=\"%d\">graph scope</text>\n",
            X0 + PW + 15, ly, X0 + PW + 30, ly + 9);
    ly += 16;
    fprintf(f,
            "<rect x=\"%d\" y=\"%d\" width=\"10\" height=\"10\" fill=\"#fdae6b\"/><text class=\"legend\" "
            "x=\"%d\" y=\"%d\">replay</text>\n",
            X0 + PW + 15, ly, X0 + PW + 30, ly + 9);
    fprintf(f, "</svg>\n");
  } else if (!*err) {
    snprintf(err, nerr, "out of memory");
  }
  free(bs.b);
  free(s.v);
  return rc;
}
