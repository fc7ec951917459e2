package dev.wirelint.example.blog;

import java.util.List;
import org.springframework.boot.autoconfigure.condition.ConditionalOnProperty;
import org.springframework.data.domain.PageRequest;
import org.springframework.data.domain.Sort;
import org.springframework.stereotype.Service;

/**
 * The front page through {@code @DocumentReference}: one query for the
 * posts, then Spring Data resolves each post's author with a query of its
 * own — N+1 round trips for a page of N posts.
 */
@Service
@ConditionalOnProperty(name = "blog.authors", havingValue = "per-row", matchIfMissing = true)
public class PerRowFrontPage implements FrontPage {
  private final PostWithAuthorRepository posts;

  public PerRowFrontPage(PostWithAuthorRepository posts) {
    this.posts = posts;
  }

  @Override
  public List<Entry> latest(int limit) {
    return posts.findAllBy(PageRequest.of(0, limit, Sort.by(Sort.Direction.DESC, "id"))).stream()
        .map(p -> new Entry(p.getTitle(), p.getAuthor().getName()))
        .toList();
  }
}
