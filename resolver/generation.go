package resolver

// Generation returns the generation of the roster being served, 0 before
// the first. Unlike Roster it copies nothing.
func (s *Server) Generation() uint64 {
	if t := s.table.Load(); t != nil {
		return t.gen
	}
	return 0
}
