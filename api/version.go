package api

// Version is PCP's version: pcpd's, and pcpctl's when a build sets
// none of its own.
const Version = "0.1.0"
