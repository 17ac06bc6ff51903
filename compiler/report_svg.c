/* report_svg.c — live memory over the schedule (one micro-batch's program, then the tail),
 * stacked by role, the peak marked, CUDA-graph scopes and replays shaded. Two panels on one
 * program-point axis: everything, then the transient memory alone (inputs, activations, their
 * gradients, workspace) on its own scale, so activations are not squashed under the persistent
 * parameters, gradients and optimizer state. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "report.h"

enum { W = 1100, H = 800, X0 = 70, Y0 = 30, PW = 860, PH = 380, Y1 = 480, PH1 = 260 };

static const struct {
  int role;
  const char *color;
} STACK[] = {{ROLE_PARAM, "#4c72b0"},     {ROLE_MASTER, "#6d8fc9"}, {ROLE_GRAD, "#55a868"},
             {ROLE_OPTIM, "#8172b2"},     {MEM_ROLE_GRAPH, "#937860"}, {ROLE_INPUT, "#8c8c8c"},
             {ROLE_ACT, "#dd8452"},       {ROLE_ACT_GRAD, "#c44e52"}, {ROLE_WORKSPACE, "#da8bc3"}};
enum { NSTACK = sizeof STACK / sizeof STACK[0], FIRST_TRANSIENT = 5 /* STACK[5] is ROLE_INPUT */ };

/* Text inside an SVG element: markup escaped; bytes that are not UTF-8 and control characters (an
 * XML parser rejects the file for either) written as U+FFFD. */
static void xml_write_text(FILE *f, const char *s) {
  for (const char *c = s; *c;) {
    size_t n = text_utf8_len(c);
    unsigned char b = (unsigned char)*c;
    if (b == '&') fputs("&amp;", f);
    else if (b == '<') fputs("&lt;", f);
    else if (b == '>') fputs("&gt;", f);
    else if (b == '"') fputs("&quot;", f);
    else if (n == 0 || (b < 0x20 && b != '\t')) fputs("\xef\xbf\xbd", f);
    else fwrite(c, 1, n, f);
    c += n ? n : 1;
  }
}

/* A round tick step (1, 2 or 5 times a power of ten) that gives three to five ticks up to ymax. */
static double tick_step(double ymax) {
  double raw = ymax / 4, p = pow(10, floor(log10(raw))), m = raw / p;
  return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * p;
}

/* Where each phase of the step begins, as a dashed line and its name: the picture reads forward,
 * backward (with its replays), gradient reduction, optimizer. */
static void phase_marks(const Plan *p, FILE *f, double dx, int y0, int ph_h) {
  static const char *const NAME[IR_PHASE_COUNT] = {[IR_PHASE_FORWARD] = "forward", [IR_PHASE_BACKWARD] = "backward",
                                                   [IR_PHASE_REPLAY] = "backward", [IR_PHASE_REDUCE] = "reduce",
                                                   [IR_PHASE_OPTIMIZER] = "optimizer"};
  bool seen[IR_PHASE_COUNT] = {false};
  for (int i = 0, q = 0; i < p->sc.n; i++) {
    if (p->sc.it[i].kind != SCHED_OP) continue;
    Phase ph = p->g->op[p->sc.it[i].id].tags.phase;
    if (ph == IR_PHASE_REPLAY) ph = IR_PHASE_BACKWARD; /* replays run inside the backward pass */
    if (ph < IR_PHASE_COUNT && !seen[ph]) {
      seen[ph] = true;
      double x = X0 + dx * q;
      fprintf(f, "<line class=\"phase\" x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#444\" stroke-dasharray=\"2,3\"/>\n", x, y0, x,
              y0 + ph_h);
      fprintf(f, "<text class=\"phase\" x=\"%.1f\" y=\"%d\" fill=\"#444\">%s</text>\n", x + 3, y0 + 11, NAME[ph]);
    }
    q++;
  }
}

/* The sum of STACK[k0..k] at program point i. */
static double stacked(const MemPlan *mp, int i, int k0, int k) {
  double cum = 0;
  for (int j = k0; j <= k; j++) cum += (double)mp->live_role[(size_t)i * MEM_NROLES + STACK[j].role];
  return cum;
}

/* One panel: roles STACK[k0..] stacked at y0 with height ph_h on their own round-ticked scale,
 * scopes and replays shaded, phases marked, the panel's maximum dashed in red. */
static int panel(const Plan *p, FILE *f, const char *id, int k0, int y0, int ph_h) {
  const MemPlan *mp = &p->mp;
  int n = mp->npos, top = 0;
  double dx = n > 1 ? (double)PW / (n - 1) : PW, most = 0;
  for (int i = 0; i < n; i++) {
    double v = stacked(mp, i, k0, NSTACK - 1);
    if (v > most) most = v, top = i;
  }
  if (k0 == 0 && mp->peak > 0) most = (double)mp->peak, top = mp->peak_pos;
  double ymax = (most > 0 ? most : 1) * 1.08;
  fprintf(f, "<g class=\"panel\" id=\"%s\">\n", id);
  int *pt = malloc((size_t)(p->sc.n + 1) * sizeof *pt), q = 0;
  if (!pt) return -1;
  for (int i = 0; i < p->sc.n; i++) pt[i] = p->sc.it[i].kind == SCHED_OP ? q++ : q;
  for (int i = 0; i < p->sr.n; i++) {
    const ScopeInst *s = &p->sr.s[i];
    double a = X0 + dx * pt[s->first], b = X0 + dx * (pt[s->last] + 1);
    fprintf(f, "<rect x=\"%.1f\" y=\"%d\" width=\"%.1f\" height=\"%d\" fill=\"#9ecae1\" opacity=\"0.25\"/>\n", a, y0, b - a, ph_h);
  }
  for (int i = 0; i < p->sc.n; i++)
    if (p->sc.it[i].kind == SCHED_OP && p->g->op[p->sc.it[i].id].tags.phase == IR_PHASE_REPLAY)
      fprintf(f, "<rect x=\"%.1f\" y=\"%d\" width=\"%.1f\" height=\"%d\" fill=\"#fdae6b\" opacity=\"0.45\"/>\n",
              X0 + dx * pt[i], y0, dx > 1 ? dx : 1, ph_h);
  free(pt);
  for (int k = NSTACK - 1; k >= k0; k--) { /* stacked areas, bottom up */
    fprintf(f, "<polygon fill=\"%s\" points=\"", STACK[k].color);
    for (int i = 0; i < n; i++) fprintf(f, "%.1f,%.1f ", X0 + dx * i, y0 + ph_h - ph_h * stacked(mp, i, k0, k) / ymax);
    fprintf(f, "%.1f,%d %d,%d\"/>\n", X0 + dx * (n - 1), y0 + ph_h, X0, y0 + ph_h);
  }
  fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"black\"/>\n", X0, y0 + ph_h, X0 + PW, y0 + ph_h);
  fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"black\"/>\n", X0, y0, X0, y0 + ph_h);
  double step = tick_step(ymax);
  int decimals = step >= 1e9 ? 0 : (int)ceil(-log10(step / 1e9) - 1e-9);
  for (int t = 0; t * step <= ymax; t++) {
    double v = t * step, y = y0 + ph_h - ph_h * v / ymax;
    fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"black\"/>", X0 - 3, y, X0, y);
    fprintf(f, "<text class=\"tick\" x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%.*f</text>\n", X0 - 5, y + 4, decimals, v / 1e9);
  }
  phase_marks(p, f, dx, y0, ph_h);
  double px = X0 + dx * top, py = y0 + ph_h - ph_h * most / ymax;
  fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"red\" stroke-dasharray=\"4,3\"/>\n", px, y0, px, y0 + ph_h);
  if (k0 == 0)
    fprintf(f, "<text class=\"peak\" x=\"%.1f\" y=\"%.1f\" fill=\"red\">peak %.3f GB (arena %.3f GB)</text>\n", px + 4,
            py - 4 > y0 + 10 ? py - 4 : y0 + 10, (double)mp->peak / 1e9, (double)(mp->arena + mp->region) / 1e9);
  else
    fprintf(f, "<text class=\"peak\" x=\"%.1f\" y=\"%.1f\" fill=\"red\">most %.3f GB transient</text>\n", px + 4,
            py - 4 > y0 + 10 ? py - 4 : y0 + 10, most / 1e9);
  fprintf(f, "</g>\n");
  return 0;
}

int report_plan_svg(const Plan *p, FILE *f) {
  fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" font-family=\"sans-serif\" font-size=\"11\">\n", W, H);
  fprintf(f, "<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n", W, H);
  fprintf(f, "<title>stepc plan: ");
  xml_write_text(f, p->spec.recipe_path);
  fprintf(f, "</title>\n<text x=\"%d\" y=\"18\" font-size=\"13\">", X0);
  xml_write_text(f, p->spec.recipe_path);
  fprintf(f, ": live memory over one micro-batch and the step tail (single rank, GB)</text>\n");
  if (panel(p, f, "all", 0, Y0, PH) != 0) return -1;
  fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"13\">transient memory alone (inputs, activations, their gradients, workspace), "
             "on its own scale (GB)</text>\n", X0, Y1 - 12);
  if (panel(p, f, "transient", FIRST_TRANSIENT, Y1, PH1) != 0) return -1;
  fprintf(f, "<text x=\"%d\" y=\"%d\">program point (op) -&gt;  forward | backward + replays | tail</text>\n", X0, Y1 + PH1 + 18);
  int ly = Y0;
  for (int k = 0; k < NSTACK; k++, ly += 16) {
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"10\" height=\"10\" fill=\"%s\"/>", X0 + PW + 15, ly, STACK[k].color);
    fprintf(f, "<text x=\"%d\" y=\"%d\">%s</text>\n", X0 + PW + 30, ly + 9, memplan_role_name(STACK[k].role));
  }
  fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"10\" height=\"10\" fill=\"#9ecae1\" opacity=\"0.5\"/><text x=\"%d\" y=\"%d\">graph scope</text>\n",
          X0 + PW + 15, ly, X0 + PW + 30, ly + 9);
  ly += 16;
  fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"10\" height=\"10\" fill=\"#fdae6b\"/><text x=\"%d\" y=\"%d\">replay</text>\n",
          X0 + PW + 15, ly, X0 + PW + 30, ly + 9);
  fprintf(f, "</svg>\n");
  return 0;
}
