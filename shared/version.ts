/** The IOP release every tier reports. */
export const IOP_VERSION = "0.1.0";
