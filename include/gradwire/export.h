/* Symbol visibility for gradwire's public API. Everything else stays hidden. */
#ifndef GRADWIRE_EXPORT_H_
#define GRADWIRE_EXPORT_H_

#if defined(__GNUC__)
#define GW_API __attribute__((visibility("default")))
#else
#define GW_API
#endif

#endif /* GRADWIRE_EXPORT_H_ */
