/* cost_h200.h — the H200 cost model's calibration: measured time / roofline time per op class
 * (cost.h's CostClass), included inside cost_device_h200(Device *d). Not calibrated yet: every
 * class at its roofline. */
d->calibration = "roofline (not calibrated)";
